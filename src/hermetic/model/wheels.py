"""Wheel recipes: what `recipes/wheels/<name>.yaml` says (a project of this checkout or a pinned release sdist,
its requirements, the LLVM recipes and variants it builds against, and how its build is driven), read and checked."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from hermetic.core import platforms
from hermetic.core.errors import RecipeError

# how a recipe hands CMake its arguments: scikit-build-core's config settings, or the CMAKE_ARGS environment variable
CMAKE_ARGS_MODES = ("config-settings", "CMAKE_ARGS")


@dataclass(frozen=True)
class SdistPin:
    """What a wheel recipe's `sdist:` says."""

    name: str  # the distribution's name: llvmlite
    version: str
    file: str  # llvmlite-0.50.0.tar.gz
    sha256: str
    url: str  # where the release is published ('' for none: mirrors only)
    strip_root: str  # the top-level directory every member is under: llvmlite-0.50.0

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "file": self.file, "sha256": self.sha256, "url": self.url}


@dataclass(frozen=True)
class ZigLink:
    """What a project's link line needs under the pinned zig: flags its driver refuses, dropped by the compiler
    wrappers, and the symbols a generated version script exports instead (what those flags were for)."""

    drop: tuple[str, ...] = ()
    exports: tuple[str, ...] = ()


@dataclass(frozen=True)
class WheelRecipe:
    """recipes/NAME/wheel.yml: a project `hermetic wheel` builds against an LLVM tree: the compiler core (a
    directory of this checkout), or another project's release sdist (pinned by sha256)."""

    path: Path
    name: str
    project: str  # a directory of the checkout; '' for an sdist
    requirements: str
    llvm_recipe: str
    cmake_defines: tuple[tuple[str, str], ...]
    exclude: tuple[str, ...]
    sdist: SdistPin | None = None
    source_date_epoch: int | None = None  # an sdist's; the compiler core takes its LLVM release's
    llvm_versions: tuple[str, ...] = ()  # the LLVM releases it builds against; () = the LLVM recipe's default
    variants: tuple[str, ...] = ()  # the variants it builds against; () = any holding needs_targets
    needs_targets: tuple[str, ...] = ()
    # a JIT (llvmlite's) compiles for the machine it runs on: the LLVM must hold the target of the wheel's arch
    needs_host_target: bool = False
    cmake_args: str = "config-settings"
    env: tuple[tuple[str, str], ...] = ()
    zig_link: ZigLink = field(default_factory=ZigLink)

    def digest(self) -> str:
        data: list[object] = [self.project, self.requirements, self.llvm_recipe, self.cmake_defines, self.exclude]
        if self.sdist is not None or self.cmake_args != "config-settings" or self.env or self.zig_link != ZigLink():
            # only what a recipe of the compiler core's shape does not have: its digest stays what it was
            data += [self.sdist.as_json() if self.sdist else None, self.source_date_epoch, self.cmake_args,
                     self.env, [self.zig_link.drop, self.zig_link.exports]]
        return hashlib.sha256(json.dumps(data).encode()).hexdigest()

    def fits(self, version: str, default_version: str, variant: str, targets: tuple[str, ...], arch: str = "") -> str:
        """'' when it builds against `variant` of LLVM `version` for `arch` (unchecked when ''), else why not."""
        releases = self.llvm_versions or (default_version,)
        if version not in releases:
            return f"{self.name} builds against LLVM {', '.join(releases)}, not {version}"
        if self.variants and variant not in self.variants:
            return f"{self.name} builds against the variant{'s' if len(self.variants) > 1 else ''} {', '.join(self.variants)}"
        missing = [t for t in self.needs_targets if t not in targets]
        if missing:
            return f"{self.name} needs the target{'s' if len(missing) > 1 else ''} {', '.join(missing)}, which {variant} leaves out"
        host = self.missing_host_target(arch, targets)
        if host:
            return f"{self.name} on {arch} needs the target {host} (its JIT compiles for the machine it runs on), which {variant} leaves out"
        return ""

    def missing_host_target(self, arch: str, targets: tuple[str, ...]) -> str:
        """The LLVM target a wheel for `arch` needs (its machine's, where the recipe says so) when `targets` lack
        it; else ''. Empty `targets` (a tree that does not say) are not held against it."""
        host = platforms.PLATFORMS[arch].llvm_target if self.needs_host_target and arch in platforms.PLATFORMS else ""
        return host if host and targets and host not in targets else ""


_RECIPE_KEYS = {"project", "sdist", "source_date_epoch", "requirements", "llvm_recipe", "llvm_versions", "variants",
                "needs_targets", "needs_host_target", "cmake_args", "cmake_defines", "env", "zig_link", "exclude"}


def wheel_recipe_names(recipes_dir: Path) -> list[str]:
    """The wheel recipes of a checkout: recipes/NAME/wheel.yml, the compiler core's first."""
    names = sorted(p.parent.name for p in recipes_dir.glob("*/wheel.yml"))
    return sorted(names, key=lambda n: n != DEFAULT_RECIPE)


DEFAULT_RECIPE = "compiler"


def load_wheel_recipe(recipes_dir: Path, name: str = DEFAULT_RECIPE) -> WheelRecipe:
    path = recipes_dir / name / "wheel.yml"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        known = wheel_recipe_names(recipes_dir)
        raise RecipeError(
            f"no wheel recipe {name!r} at {path}", f"the wheel recipes of this checkout: {', '.join(known) or 'none'}",
            f"pass --recipe with one of them{'' if name != DEFAULT_RECIPE else ', or restore recipes/compiler/wheel.yml from git'}",
        ) from exc
    except yaml.YAMLError as exc:
        raise RecipeError(f"cannot read {path}", str(exc), "fix the YAML syntax") from exc
    if not isinstance(data, dict) or set(data) - _RECIPE_KEYS or "requirements" not in data or \
            ("project" in data) == ("sdist" in data):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise RecipeError(
            f"{path} is malformed", f"keys: {got}",
            f"use the keys {', '.join(sorted(_RECIPE_KEYS))}: requirements, and project or sdist (one of them)",
        )

    def mapping(key: str) -> tuple[tuple[str, str], ...]:
        value = data.get(key) or {}
        if not isinstance(value, dict):
            raise RecipeError(f"{path}: {key} must be a mapping", f"got {value!r}", "write KEY: VALUE pairs")
        return tuple(sorted((str(k), str(v)) for k, v in value.items()))

    def strings(value: object, key: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise RecipeError(f"{path}: {key} must be a list", f"got {value!r}", f"write {key}: [A, B]")
        return tuple(str(x) for x in value)

    mode = str(data.get("cmake_args", "config-settings"))
    if mode not in CMAKE_ARGS_MODES:
        raise RecipeError(f"{path}: cmake_args is {mode!r}", f"it is one of {', '.join(CMAKE_ARGS_MODES)}",
                          "config-settings for scikit-build-core projects, CMAKE_ARGS for projects that read that variable")
    pin = None
    if "sdist" in data:
        raw = data["sdist"]
        need = ("name", "version", "file", "sha256", "strip_root")
        if not isinstance(raw, dict) or any(not raw.get(k) for k in need) or set(raw) - {*need, "url"} \
                or not re.fullmatch(r"[0-9a-f]{64}", str(raw.get("sha256"))):
            raise RecipeError(f"{path}: sdist is malformed", f"got {raw!r}",
                              "give name, version, file, sha256 (64 hex digits), strip_root, and optionally url")
        if not isinstance(data.get("source_date_epoch"), int):
            raise RecipeError(f"{path}: an sdist recipe needs source_date_epoch", "every time the wheel records is clamped to it",
                              "give the newest file time in the sdist, in seconds since 1970")
        pin = SdistPin(**{k: str(raw.get(k, "")) for k in (*need, "url")})
    if not isinstance(data.get("needs_host_target", False), bool):
        raise RecipeError(f"{path}: needs_host_target must be true or false", f"got {data['needs_host_target']!r}",
                          "true for a project that compiles for the machine it runs on (a JIT)")
    link = data.get("zig_link") or {}
    if not isinstance(link, dict) or set(link) - {"drop", "exports"}:
        raise RecipeError(f"{path}: zig_link is malformed", f"got {link!r}", "give drop: [FLAGS] and exports: [SYMBOL PATTERNS]")
    return WheelRecipe(
        path=path,
        name=name,
        project=str(data.get("project", "")),
        requirements=str(data["requirements"]),
        llvm_recipe=str(data.get("llvm_recipe", "llvm")),
        cmake_defines=mapping("cmake_defines"),
        exclude=strings(data.get("exclude"), "exclude"),
        sdist=pin,
        source_date_epoch=data.get("source_date_epoch"),
        llvm_versions=strings(data.get("llvm_versions"), "llvm_versions"),
        variants=strings(data.get("variants"), "variants"),
        needs_targets=strings(data.get("needs_targets"), "needs_targets"),
        needs_host_target=bool(data.get("needs_host_target", False)),
        cmake_args=mode,
        env=mapping("env"),
        zig_link=ZigLink(strings(link.get("drop"), "zig_link.drop"), strings(link.get("exports"), "zig_link.exports")),
    )


class Checkout(Protocol):
    """What requirement_files reads of the Settings, by its shape: the wheel recipes sit below model.settings."""

    @property
    def root(self) -> Path: ...

    @property
    def recipes_dir(self) -> Path: ...

    @property
    def toolchain_dir(self) -> Path: ...


def requirement_files(settings: Checkout, recipes: list[WheelRecipe] | None = None) -> list[Path]:
    """The hash-pinned requirement files the wheelhouse holds: the LLVM build's (CMake, Ninja; the compiler core's
    too) and those of the wheel recipes (default: every recipe of the checkout), each once."""
    found = [settings.toolchain_dir / "build-requirements.txt"]
    if recipes is None:
        recipes = [load_wheel_recipe(settings.recipes_dir, n) for n in wheel_recipe_names(settings.recipes_dir)]
    for wr in recipes:
        path = settings.root / wr.requirements
        if all(path.resolve() != f.resolve() for f in found):
            found.append(path)
    return found


def matching_recipes(recipes_dir: Path, version: str, default_version: str, variant: str,
                     targets: tuple[str, ...], arch: str = "") -> tuple[list[WheelRecipe], list[str]]:
    """The wheel recipes that build against `variant` of LLVM `version` for `arch`, and why each other one does not."""
    fit, why = [], []
    for name in wheel_recipe_names(recipes_dir):
        wr = load_wheel_recipe(recipes_dir, name)
        reason = wr.fits(version, default_version, variant, targets, arch)
        (why.append(reason) if reason else fit.append(wr))
    return fit, why
