"""Frozen dataclasses to and from JSON objects, every field read and checked by its type annotation.

A field's annotation says what its JSON must be: str, int, float (an int is kept as read), bool,
`X | None`, `tuple[X, ...]` or `list[X]` (a JSON list), `tuple[tuple[str, X], ...]` (a JSON object,
read as pairs sorted by key), `dict[str, X]` or `Mapping[str, X]`, or another dataclass (an object).
Keys are written in field order. A key that is missing or null takes the field's default; an `X | None`
field without one reads as None; any other missing key is an error. Per-field options (`options`, given
as `dataclasses.field(metadata=...)`) name another JSON key and say when the key is left out. A dataclass
whose shape depends on its values reads and writes itself: a classmethod `json_decode(data, path)` and a
method `json_encode()`.

Errors are `Invalid`: the path of the field (`tree.files[3].sha256`, "" for the whole document) and
what was expected and found; the caller adds which file and what to do. Nothing of hermetic is imported.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")
Reader = Callable[[Any, str], Any]  # (JSON value, its path) -> the field's value, or Invalid
Writer = Callable[[Any], Any]
Omit = Callable[[Any, Any], bool]  # (the field's value, the whole object) -> leave the key out

_KEY = "hermetic.codec"  # this module's entry in a field's metadata
_NO_DEFAULT: Any = dataclasses.MISSING


class Invalid(Exception):
    """A JSON value that does not fit its field: where it is and why."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path or 'the document'} {why}")
        self.path, self.why = path, why


class _Options(NamedTuple):
    key: str | None
    omit: Omit | None


def options(*, key: str | None = None, omit: Omit | None = None) -> dict[str, Any]:
    """A field's JSON options for `dataclasses.field(metadata=...)`: its key (else the field's name) and when
    to leave the key out when writing (a predicate of the value and the whole object)."""
    return {_KEY: _Options(key, omit)}


def is_none(value: object, _whole: object) -> bool:
    return value is None


def is_empty(value: object, _whole: object) -> bool:
    return not value


OMIT_NONE = options(omit=is_none)
OMIT_EMPTY = options(omit=is_empty)


def kind(value: object) -> str:
    """What a JSON value is, as an error message says it."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# -- readers and writers, made once per type -----------------------------------------------------------


def _scalar(want: type | tuple[type, ...], what: str) -> Reader:
    def read(value: Any, path: str) -> Any:
        # JSON true is no number: bool is a subclass of int, so it is refused unless asked for
        if not isinstance(value, want) or (isinstance(value, bool) and want is not bool):
            raise Invalid(path, f"is {kind(value)}, expected {what}")
        return value

    return read


_SCALARS: dict[Any, Reader] = {
    str: _scalar(str, "a string"), int: _scalar(int, "an integer"), float: _scalar((int, float), "a number"),
    bool: _scalar(bool, "true or false"),
}


def _optional(inner: Reader) -> Reader:
    return lambda value, path: None if value is None else inner(value, path)


def _items(item: Reader, make: Callable[[Any], Any]) -> Reader:
    def read(value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise Invalid(path, f"is {kind(value)}, expected a list")
        return make(item(x, f"{path}[{i}]") for i, x in enumerate(value))

    return read


def _entries(item: Reader, make: Callable[[Any], Any]) -> Reader:
    def read(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise Invalid(path, f"is {kind(value)}, expected an object")
        return make((k, item(v, join(path, k))) for k, v in value.items())

    return read


def _pairs(items: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(items))


def _parts(tp: Any) -> tuple[str, Any]:
    """What shape of JSON an annotation is, and the annotation(s) inside it."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        return "optional", next(a for a in args if a is not type(None))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        pair = typing.get_args(args[0])
        if typing.get_origin(args[0]) is tuple and len(pair) == 2 and pair[0] is str:
            return "pairs", pair[1]
        return "tuple", args[0]
    if origin is list:
        return "list", args[0]
    if origin in (dict, Mapping) and args[0] is str:
        return "mapping", args[1]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return "dataclass", tp
    if tp in _SCALARS:
        return "scalar", tp
    raise TypeError(f"no JSON reading for the annotation {tp!r}")


def _reader(tp: Any) -> Reader:
    shape, inner = _parts(tp)
    if shape == "scalar":
        return _SCALARS[inner]
    if shape == "dataclass":
        return lambda value, path: decode(inner, value, path)
    if shape == "optional":
        return _optional(_reader(inner))
    makers: dict[str, Callable[[Any], Any]] = {"pairs": _pairs, "tuple": tuple, "list": list, "mapping": dict}
    return (_items if shape in ("tuple", "list") else _entries)(_reader(inner), makers[shape])


def _writer(tp: Any) -> Writer | None:
    """How to write a value of the annotation; None where it is written as it is."""
    shape, inner = _parts(tp)
    if shape == "scalar":
        return None
    if shape == "dataclass":
        return encode
    write = _writer(inner)
    if shape == "optional":
        return None if write is None else (lambda v: None if v is None else write(v))
    if shape in ("tuple", "list"):
        return list if write is None else (lambda v: [write(x) for x in v])
    if write is None:
        return dict
    return lambda v: {k: write(x) for k, x in (v.items() if isinstance(v, Mapping) else v)}


class _Field(NamedTuple):
    name: str
    key: str
    read: Reader
    write: Writer | None
    omit: Omit | None
    absent: Any  # the value of a missing or null key; _NO_DEFAULT: the key is required


class _Plan(NamedTuple):
    fields: tuple[_Field, ...]
    read_self: Callable[[dict[str, Any], str], Any] | None  # a class that reads and writes itself
    write_self: Callable[[Any], dict[str, Any]] | None


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    found = _PLANS.get(cls)
    if found is None:
        found = _PLANS[cls] = _make_plan(cls)
    return found


def _make_plan(cls: type) -> _Plan:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    read_self, write_self = getattr(cls, "json_decode", None), getattr(cls, "json_encode", None)
    if (read_self is None) != (write_self is None):
        raise TypeError(f"{cls.__name__} must define both json_decode and json_encode, or neither")
    if read_self is not None:
        return _Plan((), read_self, write_self)
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        opts: _Options = f.metadata.get(_KEY, _Options(None, None))
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: a default factory has no JSON reading; give a default")
        absent = f.default
        if absent is dataclasses.MISSING and _parts(hints[f.name])[0] == "optional":
            absent = None
        tp = hints[f.name]
        fields.append(_Field(f.name, opts.key or f.name, _reader(tp), _writer(tp), opts.omit, absent))
    return _Plan(tuple(fields), None, None)


# -- the two directions -----------------------------------------------------------------------------------


def decode(cls: type[T], data: object, path: str = "") -> T:
    """The dataclass `cls` read from a JSON object, or Invalid naming the first field that does not fit."""
    if not isinstance(data, dict):
        raise Invalid(path, f"is {kind(data)}, expected an object")
    plan = _plan(cls)
    if plan.read_self is not None:
        made: T = plan.read_self(data, path)
        return made
    values = {}
    for f in plan.fields:
        value = data.get(f.key)
        if value is None and f.absent is not _NO_DEFAULT:
            values[f.name] = f.absent
        elif value is None and f.key not in data:
            raise Invalid(join(path, f.key), "is missing")
        else:  # null for a required field falls to its reader, which says what it expected
            values[f.name] = f.read(value, join(path, f.key))
    return cls(**values)


def read(data: Mapping[str, Any], key: str, tp: Any, path: str = "") -> Any:
    """One key of a JSON object read as the annotation `tp` (for classes that read themselves)."""
    if key not in data:
        raise Invalid(join(path, key), "is missing")
    reader = _READERS.get(tp) or _READERS.setdefault(tp, _reader(tp))
    return reader(data[key], join(path, key))


_READERS: dict[Any, Reader] = {}


def encode(obj: object) -> dict[str, Any]:
    """The JSON object of a dataclass: its fields in order, by their keys, less those their options leave out."""
    plan = _plan(type(obj))
    if plan.write_self is not None:
        return plan.write_self(obj)
    out: dict[str, Any] = {}
    for f in plan.fields:
        value = getattr(obj, f.name)
        if f.omit is not None and f.omit(value, obj):
            continue
        out[f.key] = value if f.write is None else f.write(value)
    return out
