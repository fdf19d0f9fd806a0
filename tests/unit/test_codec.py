"""The dataclass JSON codec: annotations read and checked, keys written in field order, errors with the field path."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermetic.core import codec
from hermetic.core.codec import OMIT_EMPTY, OMIT_NONE, Invalid, decode, encode

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Leaf:
    name: str
    count: int


@dataclass(frozen=True)
class Shapes:
    """One field of every supported shape, declared in an order that is not alphabetical."""

    zeta: str
    alpha: int
    ratio: float
    ok: bool
    leaf: Leaf
    leaves: tuple[Leaf, ...]
    tags: tuple[str, ...]
    names: list[str]
    pairs: tuple[tuple[str, str], ...]
    loose: tuple[tuple[str, str | None], ...] | None
    counts: Mapping[str, int]
    maybe: Leaf | None
    renamed: str = field(default="x", metadata=codec.options(key="from"))
    note: str = field(default="", metadata=OMIT_EMPTY)
    extra: int | None = field(default=None, metadata=OMIT_NONE)


FULL: dict[str, Any] = {
    "zeta": "z", "alpha": 3, "ratio": 2, "ok": False, "leaf": {"name": "a", "count": 1},
    "leaves": [{"name": "b", "count": 2}, {"name": "c", "count": 3}], "tags": ["t1", "t2"], "names": ["n"],
    "pairs": {"k1": "v1", "k2": "v2"}, "loose": {"lib.so": None, "m.so": "/lib/m.so"}, "counts": {"x": 1},
    "maybe": None, "from": "there", "note": "said", "extra": 0,
}


def test_a_full_object_round_trips_in_field_order() -> None:
    got = decode(Shapes, FULL)
    assert got.leaves[1] == Leaf("c", 3) and got.pairs == (("k1", "v1"), ("k2", "v2")) and got.renamed == "there"
    assert got.ratio == 2 and isinstance(got.ratio, int)  # a number is kept as read, so it is written back the same
    out = encode(got)
    assert list(out) == [*list(FULL)[:12], "from", "note", "extra"]  # the fields' order, not the input's or sorted
    assert out == FULL and json.dumps(out) == json.dumps(FULL)


def test_keys_are_written_in_field_order_whatever_order_they_were_read_in() -> None:
    shuffled = dict(sorted(FULL.items(), reverse=True))
    assert list(encode(decode(Shapes, shuffled))) == list(FULL)


def test_pairs_are_read_sorted_and_written_as_an_object() -> None:
    got = decode(Shapes, FULL | {"pairs": {"b": "2", "a": "1"}})
    assert got.pairs == (("a", "1"), ("b", "2")) and encode(got)["pairs"] == {"a": "1", "b": "2"}


def test_only_the_options_leave_keys_out() -> None:
    bare = decode(Shapes, {k: v for k, v in FULL.items() if k not in ("from", "note", "extra")})
    assert (bare.renamed, bare.note, bare.extra) == ("x", "", None)
    out = encode(bare)
    assert "note" not in out and "extra" not in out
    assert out["from"] == "x" and out["maybe"] is None and out["loose"] == {"lib.so": None, "m.so": "/lib/m.so"}
    kept = encode(decode(Shapes, FULL | {"note": "", "extra": 0, "tags": [], "maybe": None}))
    assert "note" not in kept and kept["extra"] == 0 and kept["tags"] == [] and kept["maybe"] is None


def test_missing_and_null_keys() -> None:
    with pytest.raises(Invalid) as exc:
        decode(Shapes, {k: v for k, v in FULL.items() if k != "zeta"})
    assert (exc.value.path, exc.value.why) == ("zeta", "is missing")
    with pytest.raises(Invalid) as exc:
        decode(Shapes, FULL | {"leaf": None})
    assert (exc.value.path, exc.value.why) == ("leaf", "is null, expected an object")
    got = decode(Shapes, {k: v for k, v in FULL.items() if k not in ("maybe", "loose")} | {"note": None})
    assert (got.maybe, got.loose, got.note) == (None, None, "")  # optional: None; null with a default: the default


@pytest.mark.parametrize(
    ("key", "value", "path", "why"),
    [
        ("zeta", 1, "zeta", "is an integer, expected a string"),
        ("alpha", True, "alpha", "is a boolean, expected an integer"),
        ("alpha", 1.5, "alpha", "is a number, expected an integer"),
        ("alpha", "3", "alpha", "is a string, expected an integer"),
        ("ratio", False, "ratio", "is a boolean, expected a number"),
        ("ok", 1, "ok", "is an integer, expected true or false"),
        ("leaf", [], "leaf", "is a list, expected an object"),
        ("leaf", {"name": "a"}, "leaf.count", "is missing"),
        ("leaves", {}, "leaves", "is an object, expected a list"),
        ("leaves", [{"name": "b", "count": 2}, "c"], "leaves[1]", "is a string, expected an object"),
        ("leaves", [{"name": "b", "count": 2}, {"name": 3, "count": 3}], "leaves[1].name",
         "is an integer, expected a string"),
        ("tags", ["a", None], "tags[1]", "is null, expected a string"),
        ("names", "n", "names", "is a string, expected a list"),
        ("pairs", {"k": ["v"]}, "pairs.k", "is a list, expected a string"),
        ("pairs", [["k", "v"]], "pairs", "is a list, expected an object"),
        ("loose", {"lib.so": 1}, "loose.lib.so", "is an integer, expected a string"),
        ("counts", {"x": "1"}, "counts.x", "is a string, expected an integer"),
        ("maybe", {"name": "m", "count": None}, "maybe.count", "is null, expected an integer"),
        ("from", 7, "from", "is an integer, expected a string"),
        ("extra", "0", "extra", "is a string, expected an integer"),
    ],
)
def test_a_wrong_type_is_refused_with_the_field_path(key: str, value: Any, path: str, why: str) -> None:
    with pytest.raises(Invalid) as exc:
        decode(Shapes, FULL | {key: value}, "top")
    assert (exc.value.path, exc.value.why) == (f"top.{path}", why)


def test_the_document_itself_must_be_an_object() -> None:
    for data in ([], "x", None, 3):
        with pytest.raises(Invalid) as exc:
            decode(Shapes, data)
        assert exc.value.path == "" and exc.value.why.endswith("expected an object")


_JSON_KINDS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
_WANTS = {"zeta": str, "alpha": int, "ok": bool, "tags": list, "leaf": dict}


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(sorted(_WANTS)), value=_JSON_KINDS)
def test_any_value_of_another_json_kind_is_refused_at_its_key(key: str, value: Any) -> None:
    want = _WANTS[key]
    fits = isinstance(value, want) and not (isinstance(value, bool) and want is int)
    fits = fits and (want is not list or value == [])  # the lists drawn hold integers: only [] is a list of strings
    if fits and want is not dict:
        assert encode(decode(Shapes, FULL | {key: value}))[key] == value
        return
    with pytest.raises(Invalid) as exc:
        decode(Shapes, FULL | {key: value})
    assert exc.value.path == key or exc.value.path.startswith((f"{key}.", f"{key}["))


@dataclass(frozen=True)
class Odd:
    value: int | str


@dataclass(frozen=True)
class Fixed:
    pair: tuple[int, str]


@dataclass(frozen=True)
class Factory:
    items: tuple[str, ...] = field(default_factory=tuple)


@pytest.mark.parametrize("cls", [Odd, Fixed, Factory])
def test_an_annotation_without_a_json_reading_is_a_programming_error(cls: type) -> None:
    with pytest.raises(TypeError):
        decode(cls, {})


@dataclass(frozen=True)
class Mode:
    """A class that reads and writes itself (its JSON is an octal string)."""

    bits: int

    @classmethod
    def json_decode(cls, data: dict[str, Any], path: str) -> Mode:
        return cls(int(codec.read(data, "mode", str, path), 8))

    def json_encode(self) -> dict[str, Any]:
        return {"mode": f"{self.bits:04o}"}


@dataclass(frozen=True)
class HasModes:
    modes: tuple[Mode, ...]


def test_a_class_that_reads_itself_is_used_inside_others() -> None:
    data = {"modes": [{"mode": "0755"}, {"mode": "0644"}]}
    got = decode(HasModes, data)
    assert got.modes == (Mode(0o755), Mode(0o644)) and encode(got) == data
    with pytest.raises(Invalid) as exc:
        decode(HasModes, {"modes": [{"mode": "0755"}, {"mode": 644}]})
    assert (exc.value.path, exc.value.why) == ("modes[1].mode", "is an integer, expected a string")
    with pytest.raises(Invalid) as exc:
        decode(HasModes, {"modes": [{}]})
    assert (exc.value.path, exc.value.why) == ("modes[0].mode", "is missing")
