"""Finding backends: built in, entry points (`tilec.backends`), and TILEC_PLUGIN_DIRS.

Entry points: a distribution declares

    [project.entry-points."tilec.backends"]
    cpu = "tilec_cpu:CPUBackend"

Plugin directories: each directory in TILEC_PLUGIN_DIRS (os.pathsep-separated) either
holds a `tilec-plugin.toml` itself or has subdirectories that do. The manifest names
the backend and its entry inside the directory:

    name = "cpu"                   # the backend's name: targets are "cpu:<arch>"
    entry = "backend:CPUBackend"   # module (relative to the directory) : object
    paths = ["vendor"]             # optional: directories put on sys.path first

The directory is imported as a package under a name tilec makes up, so its own
name may be anything ("cpu backend-1.2"); its modules use relative imports.

Only names are read up front; a plugin's code is imported when its backend is
first asked for. Problems are kept and reported with the plugin and its origin:
a duplicate name when that name is asked for, a broken plugin when it is loaded,
an unusable directory or manifest alongside any unknown-target error, and all of
them by `tilec backends`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import re
import sys
import threading
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PluginError, TargetError
from ..kernel import CompileOptions
from .base import Backend, Target
from .cuda import arch as cuda_arch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

ENTRY_POINT_GROUP = "tilec.backends"
MANIFEST = "tilec-plugin.toml"
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class Plugin:
    """Where one backend comes from; `load()` imports it."""

    name: str
    kind: str  # "built in", "entry point", "plugin directory"
    origin: str  # a sentence naming the place: the distribution, the directory, ...
    load: Callable[[], Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class BackendStatus:
    """One line of `tilec backends`."""

    name: str
    origin: str
    backend: Backend | None
    error: PluginError | None


def _builtin_cuda() -> Any:
    from .cuda import CudaBackend

    return CudaBackend


def _bare_arch(spec: str) -> tuple[str, str] | None:
    """A target written as the in-tree backend's bare arch ("sm_90", "90") -> (name, arch)."""
    return ("cuda", spec) if cuda_arch.is_bare_target(spec) else None


def _dist_text(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "an unknown distribution"
    where = getattr(dist, "_path", None)
    text = f"distribution {dist.metadata['Name']} {dist.version}"
    return f"{text} ({where})" if where is not None else text


def _entry_point_plugins() -> list[Plugin]:
    try:
        eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # a broken distribution on sys.path must not break tilec
        return []
    return [
        Plugin(
            name=ep.name,
            kind="entry point",
            origin=f"entry point '{ep.name} = {ep.value}' of {_dist_text(ep)}",
            load=ep.load,
        )
        for ep in sorted(eps, key=lambda e: (e.name, e.value))
    ]


def _import_directory(directory: Path, name: str, entry: str, paths: Sequence[str]) -> Any:
    """Import `entry` ("module:object") from `directory`, whatever the directory is called."""
    module_part, sep, attr = entry.partition(":")
    if not sep or not attr:
        raise ValueError(
            f"entry must look like 'module:object' (module may be empty), got {entry!r}"
        )
    for extra in paths:
        p = str((directory / extra).resolve())
        if p not in sys.path:
            sys.path.insert(0, p)
    digest = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:12]
    pkg = f"_tilec_plugin_{re.sub(r'[^A-Za-z0-9_]', '_', name)}_{digest}"
    if pkg not in sys.modules:
        init = directory / "__init__.py"
        if init.is_file():
            spec = importlib.util.spec_from_file_location(
                pkg, init, submodule_search_locations=[str(directory)]
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[pkg] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[pkg]
                raise
        else:
            module = types.ModuleType(pkg)
            module.__path__ = [str(directory)]
            module.__package__ = pkg
            module.__spec__ = importlib.machinery.ModuleSpec(pkg, None, is_package=True)
            module.__spec__.submodule_search_locations = [str(directory)]
            sys.modules[pkg] = module
    target = importlib.import_module(f"{pkg}.{module_part}" if module_part else pkg)
    obj = target
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _directory_plugins(dirs: Sequence[Path]) -> tuple[list[Plugin], list[PluginError]]:
    plugins: list[Plugin] = []
    problems: list[PluginError] = []
    for entry in dirs:
        if not entry.is_dir():
            problems.append(
                PluginError(
                    f"TILEC_PLUGIN_DIRS names {entry}, which is not a directory",
                    origin=f"TILEC_PLUGIN_DIRS entry {entry}",
                )
            )
            continue
        if (entry / MANIFEST).is_file():
            candidates = [entry]
        else:
            candidates = sorted(d for d in entry.iterdir() if (d / MANIFEST).is_file())
            if not candidates:
                problems.append(
                    PluginError(
                        f"TILEC_PLUGIN_DIRS names {entry}, but neither it nor a directory "
                        f"in it holds a {MANIFEST}",
                        origin=f"TILEC_PLUGIN_DIRS entry {entry}",
                    )
                )
        for directory in candidates:
            manifest = directory / MANIFEST
            origin = f"plugin directory {directory} (manifest {manifest})"
            try:
                data = tomllib.loads(manifest.read_text())
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                problems.append(
                    PluginError(
                        f"cannot read {manifest}: {exc}", plugin=str(directory), origin=origin
                    )
                )
                continue
            name, entry_text, paths = data.get("name"), data.get("entry"), data.get("paths", [])
            bad = []
            if not isinstance(name, str) or not _NAME.match(name):
                bad.append(f"'name' must be a backend name like \"cpu\" (got {name!r})")
            if not isinstance(entry_text, str) or ":" not in entry_text:
                bad.append(f"'entry' must be \"module:object\" (got {entry_text!r})")
            if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
                bad.append(f"'paths' must be a list of strings (got {paths!r})")
            if bad:
                problems.append(
                    PluginError(
                        f"{manifest} is not a valid tilec plugin manifest: " + "; ".join(bad),
                        plugin=str(name or directory),
                        origin=origin,
                    )
                )
                continue
            assert isinstance(name, str) and isinstance(entry_text, str)
            plugins.append(
                Plugin(
                    name=name,
                    kind="plugin directory",
                    origin=origin,
                    load=functools.partial(_import_directory, directory, name, entry_text, paths),
                )
            )
    return plugins, problems


class Registry:
    """The backends one configuration can use, by name."""

    def __init__(self, plugin_dirs: Sequence[Path] = (), entry_points: bool = True) -> None:
        self._plugins: dict[str, list[Plugin]] = {}
        self._loaded: dict[str, Backend] = {}
        self._lock = threading.RLock()
        found = [Plugin("cuda", "built in", "tilec itself (built in)", _builtin_cuda)]
        self._builtin = frozenset([found[0].name])
        self.problems: list[PluginError] = []
        if plugin_dirs:
            dir_plugins, self.problems = _directory_plugins(plugin_dirs)
            found += dir_plugins
        for plugin in found:
            self._plugins.setdefault(plugin.name, []).append(plugin)
        # Scanning entry points reads every installed distribution's metadata (~9 ms with
        # a few hundred installed), so it waits until a name that is not built in is
        # asked for, or the whole list is (names(), status(), an error message).
        self._scan_pending = entry_points

    def _scan(self) -> None:
        with self._lock:
            if not self._scan_pending:
                return
            self._scan_pending = False
            for plugin in _entry_point_plugins():
                self._plugins.setdefault(plugin.name, []).append(plugin)

    def names(self) -> list[str]:
        self._scan()
        return sorted(self._plugins)

    def plugins(self, name: str) -> list[Plugin]:
        self._scan()
        return list(self._plugins.get(name, []))

    def _describe(self) -> str:
        self._scan()
        parts = [
            f"{name} ({'; '.join(p.origin for p in plugins)})"
            for name, plugins in sorted(self._plugins.items())
        ]
        text = "backends: " + ", ".join(parts)
        if self.problems:
            text += "\nplugins that could not be used:\n" + "\n".join(
                f"  {p}" for p in self.problems
            )
        return text

    def get(self, name: str) -> Backend:
        """The backend called `name`, imported on first use."""
        with self._lock:
            if name in self._loaded:
                return self._loaded[name]
            if name not in self._builtin:
                self._scan()
            plugins = self._plugins.get(name)
            if not plugins:
                raise TargetError(f"no backend named {name!r}; {self._describe()}")
            if len(plugins) > 1:
                raise PluginError(
                    f"backend name {name!r} is provided {len(plugins)} times, by "
                    + " and by ".join(p.origin for p in plugins)
                    + "; uninstall or remove all but one (or drop the directory from "
                    "TILEC_PLUGIN_DIRS)",
                    plugin=name,
                    origin="; ".join(p.origin for p in plugins),
                )
            backend = self._instantiate(plugins[0])
            self._loaded[name] = backend
            return backend

    @staticmethod
    def _instantiate(plugin: Plugin) -> Backend:
        if plugin.kind == "built in":
            # tilec's own backends need none of the checks below, whose ABC isinstance and
            # issubclass calls cost a cache hit tens of microseconds in a fresh process.
            builtin: Backend = plugin.load()()
            return builtin
        where = f"backend plugin {plugin.name!r} from {plugin.origin}"
        try:
            obj = plugin.load()
            if isinstance(obj, type) and issubclass(obj, Backend):
                backend: Any = obj()
            elif isinstance(obj, Backend):
                backend = obj
            elif callable(obj) and not isinstance(obj, type):
                backend = obj()
            else:
                backend = obj
        except Exception as exc:
            raise PluginError(
                f"{where} failed to load: {type(exc).__name__}: {exc}",
                plugin=plugin.name,
                origin=plugin.origin,
            ) from exc
        if not isinstance(backend, Backend):
            raise PluginError(
                f"{where} gives {backend!r}, which is not a tilec.backends.Backend "
                "(subclass it, or give a factory that returns an instance)",
                plugin=plugin.name,
                origin=plugin.origin,
            )
        if backend.name != plugin.name:
            raise PluginError(
                f"{where} is registered as {plugin.name!r} but its backend calls itself "
                f"{backend.name!r}; make the two names agree",
                plugin=plugin.name,
                origin=plugin.origin,
            )
        missing = [a for a in ("binary_stage", "binary_format") if not getattr(backend, a, "")]
        if missing:
            raise PluginError(
                f"{where} does not set {', '.join(missing)}",
                plugin=plugin.name,
                origin=plugin.origin,
            )
        return backend

    def resolve(self, spec: str, options: CompileOptions | None = None) -> tuple[Backend, Target]:
        """'cuda:90', 'sm_90', 'cpu:x86-64' or a bare backend name -> (backend, target)."""
        options = options or CompileOptions(target=spec)
        if not isinstance(spec, str) or not spec:
            raise TargetError(f"a target is a string like 'cuda:90', got {spec!r}")
        bare = _bare_arch(spec)
        if ":" in spec:
            name, arch = spec.split(":", 1)
        elif bare is not None:
            name, arch = bare
        elif spec in self._builtin or spec in self._plugins or spec in self.names():
            name, arch = spec, ""
        else:
            raise TargetError(
                f"unknown target {spec!r}: write <backend>:<arch>, e.g. cuda:90; {self._describe()}"
            )
        backend = self.get(name)
        if not arch:
            if backend.default_arch is None:
                raise TargetError(
                    f"target {spec!r}: backend {name!r} needs an arch ({name}:<arch>)"
                )
            arch = backend.default_arch
        plugin = self._plugins[name][0]
        try:
            return backend, backend.parse_target(arch, options)
        except TargetError as exc:
            raise TargetError(f"{exc} [backend {name!r} from {plugin.origin}]") from None
        except Exception as exc:
            raise PluginError(
                f"backend plugin {name!r} from {plugin.origin} failed to parse target "
                f"{spec!r}: {type(exc).__name__}: {exc}",
                plugin=name,
                origin=plugin.origin,
            ) from exc

    def resolve_quick(self, spec: str, options: CompileOptions) -> tuple[Backend, Target] | None:
        """(backend, target) for a built-in backend's target, without scanning plugins or
        validating the arch against LLVM (`Backend.quick_target`); None when that cannot
        be done. For cache lookups: a key exists only for targets that once compiled."""
        if not isinstance(spec, str):
            return None
        bare = _bare_arch(spec)
        if ":" in spec:
            name, arch = spec.split(":", 1)
        elif bare is not None:
            name, arch = bare
        else:
            return None
        if name not in self._builtin or len(self._plugins.get(name, ())) != 1:
            return None
        backend = self.get(name)
        try:
            target = backend.quick_target(arch or backend.default_arch or "", options)
        except Exception:
            return None
        return None if target is None else (backend, target)

    def status(self) -> list[BackendStatus]:
        """Every backend, loaded, with its origin or its error (for `tilec backends`)."""
        out: list[BackendStatus] = []
        for name in self.names():
            origin = "; ".join(p.origin for p in self._plugins[name])
            try:
                out.append(BackendStatus(name, origin, self.get(name), None))
            except PluginError as exc:
                out.append(BackendStatus(name, origin, None, exc))
        for problem in self.problems:
            out.append(BackendStatus(problem.plugin or "?", problem.origin, None, problem))
        return out


@functools.lru_cache(maxsize=16)
def _registry(plugin_dirs: tuple[Path, ...]) -> Registry:
    return Registry(plugin_dirs)


def registry_for(plugin_dirs: Sequence[Path] = ()) -> Registry:
    """The (cached) registry for these plugin directories; see `reset()`."""
    return _registry(tuple(plugin_dirs))


def reset() -> None:
    """Forget discovered backends (after installing a plugin into a running process)."""
    _registry.cache_clear()
