"""Load and validate recipes and their variants into frozen dataclasses."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hermetic.core.errors import RecipeError

_LIBRARY = re.compile(r"^(LLVM|MLIR)[A-Za-z0-9]+$")
OPTION_NAMES = ("targets", "projects", "components", "tools")
PRUNE_KEYS = ("keep_top", "drop_top", "drop_in_project", "td_always")


@dataclass(frozen=True)
class Archive:
    file: str
    sha256: str
    origin: str
    strip_root: str
    url: str = ""
    apt_source_package: str = ""
    apt_source_version: str = ""


@dataclass(frozen=True)
class PruneRules:
    """What a pruned source keeps of a release: data of the recipe, per version."""

    keep_top: tuple[str, ...]
    drop_top: tuple[str, ...]
    drop_in_project: tuple[str, ...]
    td_always: tuple[str, ...]

    def as_json(self) -> dict[str, list[str]]:
        return {k: list(getattr(self, k)) for k in ("keep_top", "drop_top", "drop_in_project", "td_always")}


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    options: tuple[tuple[str, str], ...]
    # The releases whose libraries the options name (a library list is one release's); empty: every one.
    versions: tuple[str, ...] = ()

    def option(self, key: str) -> str:
        return dict(self.options)[key]

    def values(self, key: str) -> list[str]:
        return [v.strip() for v in self.option(key).split(";") if v.strip()]

    def digest(self) -> str:
        return hashlib.sha256(json.dumps([self.name, self.options]).encode()).hexdigest()


@dataclass(frozen=True)
class Recipe:
    name: str
    version: str
    path: Path
    source_date_epoch: int
    archives: tuple[Archive, ...]
    option_values: tuple[tuple[str, tuple[str, ...]], ...]
    variants: tuple[Variant, ...]
    default_variant: str
    files_digest: str
    prefix_template: str
    prune: PruneRules
    versions: tuple[str, ...] = ()  # every release conandata.yml pins; `version` is the one loaded
    default_version: str = ""  # conandata.yml's default_version (the first pinned when it names none)
    # The checkout whose toolchain/ builds this recipe: recipes/NAME's parent's parent, or the project root
    # for a recipe kept elsewhere (--llvm-recipe DIR). None: derived from `path`.
    root: Path | None = None
    # The top directory of a pruned archive (conandata.yml `pruned_root`); LLVM's historical name by default,
    # so the pruned archives (and their digests) of recipes/llvm stay what they were.
    pruned_root_template: str = "llvm-project-{version}.src"
    # Components accepted beside the listed ones (conandata.yml `component_pattern`; "" for none): LLVM's and
    # MLIR's library names by default, which recipes/llvm's conanfile accepts.
    component_pattern: str = _LIBRARY.pattern

    def digest(self) -> str:
        return self.files_digest

    @property
    def project_root(self) -> Path:
        return self.root if self.root is not None else self.path.parents[1]

    @property
    def pruned_root(self) -> str:
        return self.pruned_root_template.format(name=self.name, version=self.version)

    def build_name(self, variant: str) -> str:
        """The build directory's name under WORK_DIR/<recipe>: the variant, with the release when it is not
        the default one, so two releases of a variant build side by side and the default's paths stay."""
        if not self.default_version or self.version == self.default_version:
            return variant
        return f"{variant}-{self.version}"

    def build_path(self, variant: str) -> str:
        """The build directory relative to the work dir: `llvm/support`, `tiny/support-2.0.0`."""
        return f"{self.name}/{self.build_name(variant)}"

    def title(self, variant: str) -> str:
        """What images and plans call a build of this recipe: `llvm-support-19.1.7`."""
        return f"{self.name}-{variant}-{self.version}"

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                if v.versions and self.version not in v.versions:
                    others = [o.name for o in self.variants if not o.versions or self.version in o.versions]
                    raise RecipeError(
                        f"variant {name!r} of recipe {self.name} does not build LLVM {self.version}",
                        f"{self.path / 'variants.yml'} names it for {', '.join(v.versions)} only "
                        "(its options list that release's libraries)",
                        f"use --llvm-version {v.versions[0]}, or a variant for {self.version}: {', '.join(others) or 'none'}",
                    )
                return v
        raise RecipeError(
            f"unknown variant {name!r} of recipe {self.name}",
            f"{self.path / 'variants.yml'} defines no such variant",
            f"valid variants: {', '.join(v.name for v in self.variants)}",
        )

    def allowed(self, option: str) -> tuple[str, ...]:
        return dict(self.option_values)[option]

    def prefix(self, variant: str) -> str:
        return self.prefix_template.format(name=self.name, variant=variant, version=self.version)


def _normalize(value: object) -> str:
    """A ;-list with no stray spaces (YAML folding puts spaces between lines)."""
    return ";".join(v.strip() for v in str(value).split(";") if v.strip())


# Files of a recipe whose content enters a build's digest only in part: conandata.yml by the release built
# (its pins, rules and epoch) and what every release shares; variants.yml by the variant built (Variant.digest,
# beside the recipe's in a build's inputs). Pinning another release or adding a variant then changes no
# digest of a build that does not use it, so the trees and substitutes already published stay found.
_DIGESTED_IN_PART = ("conandata.yml", "variants.yml")


def _files_digest(path: Path, data: dict[str, Any], version: str) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        rel = f.relative_to(path).as_posix()
        if rel in _DIGESTED_IN_PART:
            continue
        h.update(rel.encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    shared = {k: v for k, v in data.items() if k not in ("sources", "default_version")}
    h.update(b"conandata.yml\0" + json.dumps([shared, version, data["sources"][version]], sort_keys=True).encode())
    return h.hexdigest()


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise RecipeError(f"recipe file missing: {path}", "", "restore it from the repository") from exc
    except yaml.YAMLError as exc:
        raise RecipeError(f"cannot parse {path}", str(exc), "fix the YAML syntax") from exc


def load(recipes_dir: Path, name: str = "llvm", version: str | None = None) -> Recipe:
    """The recipe recipes_dir/NAME at one of the releases it pins: `version`, or conandata.yml's `default_version`."""
    return load_at(recipes_dir / name, version)


def load_at(path: Path, version: str | None = None, root: Path | None = None) -> Recipe:
    """The recipe in directory `path` (named by it), built with `root`'s toolchain/ (default: path's grandparent)."""
    name = path.name
    if not (path / "conanfile.py").is_file() and not (path / "conandata.yml").is_file():
        raise RecipeError(
            f"no recipe at {path}", "the directory holds neither conanfile.py nor conandata.yml",
            "pass --llvm-recipe NAME (a directory under recipes/) or the path of a recipe directory",
        )
    data = _read_yaml(path / "conandata.yml")
    variants_data = _read_yaml(path / "variants.yml")
    try:
        versions = {str(k): v for k, v in data["sources"].items()}
        default = str(data.get("default_version") or next(iter(versions)))
        version = str(version or default)
        if version not in versions:
            raise RecipeError(
                f"recipe {name} has no release {version}",
                f"{path / 'conandata.yml'} pins {', '.join(versions)}",
                f"use --llvm-version with one of them (HERMETIC_LLVM_VERSION; default {default}), "
                "or pin the release's archives there",
            )
        entry = versions[version]
        archives = tuple(
            Archive(
                file=a["file"],
                sha256=a["sha256"].lower(),
                origin=a["origin"],
                strip_root=a["strip_root"],
                url=a.get("url", ""),
                apt_source_package=a.get("apt_source_package", ""),
                apt_source_version=a.get("apt_source_version", ""),
            )
            for a in entry["archives"]
        )
        option_values = tuple((k, tuple(str(x) for x in v)) for k, v in data["option_values"].items())
        variants = tuple(
            Variant(
                name=vname,
                description=str(v.get("description", "")),
                options=tuple((k, _normalize(v["options"][k])) for k in OPTION_NAMES),
                versions=tuple(str(x) for x in v.get("versions", ())),
            )
            for vname, v in variants_data["variants"].items()
        )
        recipe = Recipe(
            name=name,
            version=str(version),
            path=path,
            source_date_epoch=int(entry["source_date_epoch"]),
            archives=archives,
            option_values=option_values,
            variants=variants,
            default_variant=str(variants_data["default"]),
            files_digest=_files_digest(path, data, version),
            prefix_template=str(data["install_prefix"]),
            prune=PruneRules(**{k: tuple(str(x) for x in entry["prune"][k]) for k in PRUNE_KEYS}),
            versions=tuple(versions),
            default_version=default,
            root=root,
            pruned_root_template=str(data.get("pruned_root") or Recipe.pruned_root_template),
            component_pattern=str(data.get("component_pattern", _LIBRARY.pattern) or ""),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise RecipeError(f"malformed recipe data in {path}", f"missing or wrong field: {exc}", "compare with git") from exc
    for v in recipe.variants:
        unknown = [x for x in v.versions if x not in versions]
        if unknown:
            raise RecipeError(
                f"variant {v.name} of recipe {name} names LLVM {', '.join(unknown)}",
                f"{path / 'conandata.yml'} pins {', '.join(versions)}",
                "pin that release in conandata.yml or drop it from the variant's versions",
            )
        validate_options(recipe, dict(v.options), context=f"variant {v.name}")
    if recipe.default_variant not in (v.name for v in recipe.variants):
        recipe.variant(recipe.default_variant)  # raises: the default names no variant
    return recipe


def validate_options(recipe: Recipe, options: dict[str, str], context: str = "options") -> None:
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise RecipeError(
            f"{context}: unknown option(s) {', '.join(unknown)}",
            f"recipe {recipe.name} has no such option",
            f"valid options: {', '.join(OPTION_NAMES)}",
        )
    for key in ("targets", "projects", "tools"):
        values = [v.strip() for v in options.get(key, "").split(";") if v.strip()]
        bad = [v for v in values if v not in recipe.allowed(key)]
        if bad:
            raise RecipeError(
                f"{context}: unknown value(s) for {key}: {', '.join(bad)}",
                f"recipe {recipe.name} {recipe.version} does not know them",
                f"valid {key}: {', '.join(recipe.allowed(key))}",
            )
    comps = [v.strip() for v in options.get("components", "").split(";") if v.strip()]
    pattern = re.compile(recipe.component_pattern) if recipe.component_pattern else None
    bad = [c for c in comps if c not in recipe.allowed("components") and not (pattern and pattern.match(c))]
    if bad:
        libraries = pattern is not None and pattern.pattern == _LIBRARY.pattern
        raise RecipeError(
            f"{context}: unknown component(s): {', '.join(bad)}",
            "components are LLVM/MLIR library names or named install components" if libraries
            else f"recipe {recipe.name} names its components in {recipe.path / 'conandata.yml'}",
            f"valid: {'LLVM<Library>, MLIR<Library>, ' if libraries else ''}{', '.join(recipe.allowed('components'))}",
        )


def resolve_variant(recipe: Recipe, name: str | None, overrides: dict[str, str] | None = None) -> Variant:
    """The variant's options with user overrides applied, validated; no name means the recipe's default."""
    name = name or recipe.default_variant
    base = recipe.variant(name)
    options = dict(base.options)
    if overrides:
        validate_options(recipe, overrides, context="--option")
        options.update({k: _normalize(v) for k, v in overrides.items()})
    validate_options(recipe, options, context=f"variant {name}")
    return Variant(base.name, base.description, tuple((k, options[k]) for k in OPTION_NAMES))
