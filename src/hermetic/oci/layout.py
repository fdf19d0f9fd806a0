"""OCI image layouts: write one from a build record, read and verify one, merge several into an index.

All JSON is serialised canonically (sorted keys, no whitespace) and nothing
that changes between runs of the same build (paths, timings, host names,
the clock) reaches a blob, so the same install tree gives the same manifest
digest in any directory, on any machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermetic.core import times
from hermetic.core.errors import UsageError, VerifyError
from hermetic.core.staging import staged_dir
from hermetic.model.record import load_build_record
from hermetic.oci.layer import LayerInfo, write_layer
from hermetic.oci.transport import document_limit, too_large

OCI_LAYOUT_VERSION = "1.0.0"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (MT_MANIFEST, MT_DOCKER_MANIFEST)
INDEX_TYPES = (MT_INDEX, MT_DOCKER_LIST)
REF_NAME = "org.opencontainers.image.ref.name"
LABEL_PREFIX = "io.hermetic."
LLVM_SOURCE_URL = "https://github.com/llvm/llvm-project"
LLVM_LICENSE = "Apache-2.0 WITH LLVM-exception"

_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}


def canonical_json(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def host_arch() -> str:
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


def parse_json(data: bytes | str, what: str, fix: str = "") -> Any:
    """JSON from a file or a registry, any malformed input (nested too deep included) a VerifyError."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        why = str(exc) if isinstance(exc, ValueError) else "it is nested too deeply"
        raise VerifyError(f"{what} is not valid JSON", why[:300], fix) from None


MALFORMED = "the image is malformed: write it again (`hermetic image`) or pull it again; if it came so from a registry, ask its publisher"


def _mapping(value: Any, what: str, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise VerifyError(f"malformed descriptor in {where}", f"its {what} is not an object", MALFORMED)
    return {str(k): str(v) for k, v in value.items()}


def split_digest(digest: str) -> tuple[str, str]:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise VerifyError(
            f"unsupported or malformed digest {digest[:80]!r}", "hermetic handles sha256 digests only (sha256: and 64 hex digits)",
            "name the image by a sha256 digest; an image with other digests: rewrite it with sha256 (skopeo copy)",
        )
    return algo, hexpart


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    platform: Mapping[str, str] | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.platform:
            out["platform"] = dict(self.platform)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> Descriptor:
        if not isinstance(data, dict):
            raise VerifyError(f"malformed descriptor in {where}", "a descriptor is a JSON object", MALFORMED)
        missing = [k for k in ("mediaType", "digest", "size") if k not in data]
        if missing:
            raise VerifyError(f"malformed descriptor in {where}", f"it has no {', '.join(missing)}", MALFORMED)
        size = data["size"]
        # an int64 as the image spec says: not a float (1e999), not a bool, not a string
        if type(size) is not int or not 0 <= size < 1 << 63:
            raise VerifyError(f"malformed descriptor in {where}", f"size {str(size)[:40]!r} is not a byte count", MALFORMED)
        if not isinstance(data["mediaType"], str) or not isinstance(data["digest"], str):
            raise VerifyError(f"malformed descriptor in {where}", "mediaType and digest must be strings", MALFORMED)
        desc = cls(
            media_type=data["mediaType"],
            digest=data["digest"],
            size=size,
            platform=_mapping(data["platform"], "platform", where) if data.get("platform") else None,
            annotations=_mapping(data.get("annotations") or {}, "annotations", where),
        )
        try:
            split_digest(desc.digest)
        except VerifyError as exc:
            raise VerifyError(f"malformed descriptor in {where}", exc.what, MALFORMED) from None
        return desc

    @property
    def ref_name(self) -> str:
        return self.annotations.get(REF_NAME, "")


@dataclass(frozen=True)
class LayoutRef:
    """A local OCI image layout as an image source: `oci:PATH[:TAG]`, TAG an index.json ref name."""

    path: Path
    tag: str = ""

    def __str__(self) -> str:
        return f"oci:{self.path}" + (f":{self.tag}" if self.tag else "")


class Layout:
    """An OCI image layout directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def blob_path(self, digest: str) -> Path:
        _, hexpart = split_digest(digest)
        return self.path / "blobs" / "sha256" / hexpart

    # -- writing -------------------------------------------------------------
    def init(self) -> None:
        (self.path / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (self.path / "oci-layout").write_text(json.dumps({"imageLayoutVersion": OCI_LAYOUT_VERSION}) + "\n")

    def put_bytes(self, data: bytes) -> str:
        digest = sha256_digest(data)
        dest = self.blob_path(digest)
        if not dest.exists():
            tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
            tmp.write_bytes(data)
            os.replace(tmp, dest)
        return digest

    def write_index(self, manifests: Sequence[Descriptor]) -> None:
        index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [d.as_json() for d in manifests]}
        tmp = self.path / ".index.json.tmp"
        tmp.write_bytes(json.dumps(index, indent=2, sort_keys=True).encode() + b"\n")
        os.replace(tmp, self.path / "index.json")

    # -- reading -------------------------------------------------------------
    def check(self) -> None:
        marker = self.path / "oci-layout"
        try:
            version = self._json(marker).get("imageLayoutVersion")
        except VerifyError as exc:
            if not marker.exists():
                raise UsageError(
                    f"{self.path} is not an OCI image layout",
                    "it has no oci-layout file",
                    "pass a directory written by `hermetic image` or `skopeo copy ... oci:DIR`",
                ) from None
            raise VerifyError(f"{marker} is unreadable", exc.why or exc.what, "rewrite the layout") from None
        if version != OCI_LAYOUT_VERSION:
            raise VerifyError(
                f"unsupported image layout version {str(version)[:40]!r} in {marker}", f"hermetic reads version {OCI_LAYOUT_VERSION}",
                "rewrite the layout (`skopeo copy oci:OLD oci:NEW`, or `hermetic image`)",
            )

    def index(self) -> list[Descriptor]:
        self.check()
        data = self._json(self.path / "index.json")
        manifests = data.get("manifests")
        if not isinstance(manifests, list):
            raise VerifyError(f"{self.path}/index.json has no manifests list", "", "rewrite the layout")
        return [Descriptor.from_json(m, f"{self.path}/index.json") for m in manifests]

    def read_blob(self, desc: Descriptor) -> bytes:
        """A small blob (manifest, config, index), verified against its descriptor; refused past the size cap."""
        path = self.blob_path(desc.digest)
        if desc.size > document_limit():
            raise too_large(f"blob {desc.digest} in {self.path}", desc.size, document_limit())
        try:
            with open(path, "rb") as f:
                data = f.read(desc.size + 1)
        except FileNotFoundError as exc:
            raise VerifyError(
                f"blob {desc.digest} is missing from {self.path}", str(path), "rewrite or re-pull the layout"
            ) from exc
        if len(data) != desc.size or sha256_digest(data) != desc.digest:
            raise VerifyError(
                f"blob {desc.digest} in {self.path} does not match its digest",
                f"it has {len(data)} bytes and digest {sha256_digest(data)}; expected {desc.size} bytes",
                "the layout was modified or damaged: rewrite it with `hermetic image` or pull it again",
            )
        return data

    def read_json(self, desc: Descriptor) -> dict[str, Any]:
        """A manifest, index or config: a JSON object whose fields hermetic reads have the types the image spec says."""
        data = parse_json(self.read_blob(desc), f"blob {desc.digest}", "rewrite the layout or pull it again")
        if not isinstance(data, dict):
            raise VerifyError(f"blob {desc.digest} is not a JSON object", "", MALFORMED)
        problem = _shape_problem(desc.media_type, data)
        if problem:
            raise VerifyError(f"{_KIND.get(desc.media_type, 'blob')} {desc.digest} is malformed", problem, MALFORMED)
        return data

    def verify_blob_file(self, desc: Descriptor) -> Path:
        """Hash a (possibly large) blob file; raise unless it matches its descriptor."""
        path = self.blob_path(desc.digest)
        h = hashlib.sha256()
        size = 0
        try:
            with open(path, "rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
                    size += len(block)
        except FileNotFoundError as exc:
            raise VerifyError(
                f"blob {desc.digest} is missing from {self.path}", str(path), "rewrite or re-pull the layout"
            ) from exc
        if size != desc.size or "sha256:" + h.hexdigest() != desc.digest:
            raise VerifyError(
                f"blob {desc.digest} in {self.path} does not match its digest",
                f"it has {size} bytes and digest sha256:{h.hexdigest()}; expected {desc.size} bytes",
                "the layout was modified or damaged: rewrite it with `hermetic image` or pull it again",
            )
        return path

    @staticmethod
    def _json(path: Path) -> dict[str, Any]:
        limit = document_limit()
        try:
            with open(path, "rb") as f:
                raw = f.read(limit + 1)
        except FileNotFoundError as exc:
            raise VerifyError(f"{path} is missing", "", "rewrite the layout") from exc
        except OSError as exc:
            raise VerifyError(f"{path} is unreadable", str(exc), "rewrite the layout") from exc
        if len(raw) > limit:
            raise too_large(str(path), path.stat().st_size, limit)
        data = parse_json(raw, str(path), "rewrite the layout")
        if not isinstance(data, dict):
            raise VerifyError(f"{path} is not a JSON object", "", "rewrite the layout")
        return data

    def children(self, desc: Descriptor) -> list[Descriptor]:
        """Blobs a manifest or index refers to (config and layers, or manifests)."""
        doc = self.read_json(desc)
        if desc.media_type in INDEX_TYPES:
            return [Descriptor.from_json(m, desc.digest) for m in _list(doc, "manifests", desc.digest)]
        if desc.media_type in MANIFEST_TYPES:
            if "config" not in doc:
                raise VerifyError(f"manifest {desc.digest} has no config", "", MALFORMED)
            return [Descriptor.from_json(doc["config"], desc.digest)] + [
                Descriptor.from_json(layer, desc.digest) for layer in _list(doc, "layers", desc.digest)
            ]
        raise VerifyError(
            f"unsupported media type {desc.media_type[:80]!r} for {desc.digest}", "hermetic reads OCI and Docker v2 images",
            MALFORMED,
        )

    def verify(self, desc: Descriptor | None = None) -> None:
        """Check every blob reachable from the index (or from `desc`) against its digest."""
        roots = [desc] if desc else self.index()
        for d in roots:
            self.verify_blob_file(d)
            if d.media_type in INDEX_TYPES or d.media_type in MANIFEST_TYPES:
                for child in self.children(d):
                    self.verify(child)


MT_DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
_KIND = {MT_CONFIG: "image config", MT_DOCKER_CONFIG: "image config", **dict.fromkeys(MANIFEST_TYPES, "manifest"),
         **dict.fromkeys(INDEX_TYPES, "index")}
# (path, type) of the fields hermetic reads; absent or null is fine, another type is not
_SHAPES: dict[str, tuple[tuple[tuple[str, ...], type | tuple[type, ...]], ...]] = {
    "manifest": ((("config",), dict), (("layers",), list), (("annotations",), dict), (("subject",), dict)),
    "index": ((("manifests",), list), (("annotations",), dict)),
    "image config": ((("architecture",), str), (("os",), str), (("config",), dict), (("config", "Labels"), dict),
                     (("rootfs",), dict), (("rootfs", "diff_ids"), list), (("history",), list)),
}


def _shape_problem(media_type: str, doc: Mapping[str, Any]) -> str:
    for path, kind in _SHAPES.get(_KIND.get(media_type, ""), ()):
        value: Any = doc
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, kind):
            return f"{'.'.join(path)} is {_JSON_TYPES.get(type(value), 'a value')}, where the image spec has {_JSON_TYPES[kind]}"
    labels = ((doc.get("config") or {}).get("Labels") or {}) if _KIND.get(media_type) == "image config" else {}
    if any(not isinstance(v, str) for v in labels.values()):
        return "config.Labels has values that are not strings"
    return ""


_JSON_TYPES: dict[Any, str] = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
                               bool: "a boolean"}


def _list(doc: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = doc.get(key) or []
    if not isinstance(value, list):
        raise VerifyError(f"{key} of {where} is not a list", "", "the image is malformed; rebuild or pull it again")
    return value


def check_platform(config: Mapping[str, Any], arch: str | None, os_name: str, image: str) -> None:
    """Refuse an image whose config is not the requested platform; `arch` None accepts any.

    An index is chosen from by its platform entries; a single manifest has only its
    config to say what it is, so that is what a requested --arch is checked against.
    """
    if arch is None:
        return
    have_arch, have_os = str(config.get("architecture", "")), str(config.get("os", ""))
    if have_arch != arch or (have_os and have_os != os_name):
        raise VerifyError(
            f"{image} is a {have_os or '?'}/{have_arch or '?'} image, not {os_name}/{arch}",
            f"its config says architecture {have_arch!r}, os {have_os!r}; it is a single-platform image "
            f"and {os_name}/{arch} was requested",
            f"pass --arch {have_arch} to take it anyway, or pull an image built for {arch}",
        )


def select_manifest(layout: Layout, root: Descriptor, arch: str | None = None, os_name: str = "linux") -> Descriptor:
    """The image manifest for one platform, looking through an index if needed.

    A single manifest is checked against `arch` through its config when `arch` is given.
    """
    if root.media_type in MANIFEST_TYPES:
        if arch is not None:
            config = layout.read_json(layout.children(root)[0])
            check_platform(config, arch, os_name, f"image {root.digest} in {layout.path}")
        return root
    if root.media_type not in INDEX_TYPES:
        raise VerifyError(
            f"unsupported media type {root.media_type[:80]!r}", "hermetic reads OCI and Docker v2 images and indexes", MALFORMED
        )
    want = arch or host_arch()
    choices = layout.children(root)
    for child in choices:
        plat = child.platform or {}
        if plat.get("architecture") == want and plat.get("os", "linux") == os_name:
            return select_manifest(layout, child, arch, os_name)
    have = ", ".join(
        f"{(c.platform or {}).get('os', '?')}/{(c.platform or {}).get('architecture', '?')}" for c in choices
    )
    raise UsageError(
        f"no {os_name}/{want} image in the index",
        f"it has: {have or 'nothing'}",
        "build the image on that architecture",
    )


def pick_root(layout: Layout, ref_name: str | None = None) -> Descriptor:
    entries = layout.index()
    if ref_name:
        found = [d for d in entries if d.ref_name == ref_name]
        if not found:
            names = ", ".join(d.ref_name or d.digest for d in entries)
            raise UsageError(
                f"no image named {ref_name!r} in {layout.path}", f"it has: {names}", "name one of those (oci:DIR:NAME)"
            )
        entries = found
    if len(entries) == 1:
        return entries[0]
    if not entries:
        raise VerifyError(f"{layout.path}/index.json lists no images", "", "rewrite the layout")
    # several per-platform manifests: they form an implicit multi-platform image
    raise UsageError(
        f"{layout.path} holds {len(entries)} images",
        ", ".join(d.ref_name or d.digest for d in entries),
        "merge them with `hermetic image index`, or select one by name",
    )


# -- building an image from a record ----------------------------------------------


@dataclass(frozen=True)
class ImageSpec:
    """Everything that goes into an LLVM image; parsed once from a build record."""

    variant: str
    version: str
    prefix: str  # "/usr/lib64/<recipe>-<variant>-<version>"
    install_root: Path
    epoch: int
    arch: str
    os: str
    recipe: Mapping[str, str]
    sources: tuple[tuple[str, str], ...]  # (file, sha256)
    tree_digest: str
    pruned: str = ""

    @property
    def title(self) -> str:
        return f"{self.recipe.get('name', 'llvm')}-{self.variant}-{self.version}"

    @property
    def name(self) -> str:
        return f"{self.title}-{self.os}-{self.arch}"

    def labels(self) -> dict[str, str]:
        labels = {
            "org.opencontainers.image.title": self.title,
            "org.opencontainers.image.version": self.version,
        }
        if self.recipe.get("name", "llvm") == "llvm":
            # LLVM's upstream and licence; a build record names no such thing for another recipe (the tests' tiny)
            labels |= {
                "org.opencontainers.image.source": LLVM_SOURCE_URL,
                "org.opencontainers.image.revision": f"llvmorg-{self.version}",
                "org.opencontainers.image.licenses": LLVM_LICENSE,
            }
        labels |= {
            "org.opencontainers.image.created": times.iso(self.epoch),
            LABEL_PREFIX + "recipe": self.recipe.get("name", "llvm"),
            LABEL_PREFIX + "recipe.version": self.recipe.get("version", self.version),
            LABEL_PREFIX + "recipe.digest": self.recipe.get("digest", ""),
            LABEL_PREFIX + "variant": self.variant,
            LABEL_PREFIX + "prefix": self.prefix,
            LABEL_PREFIX + "tree.digest": self.tree_digest,
        }
        if self.pruned:
            labels[LABEL_PREFIX + "pruned.digest"] = "sha256:" + self.pruned.removeprefix("sha256:")
        for file, sha in self.sources:
            labels[LABEL_PREFIX + "source." + file] = "sha256:" + sha.removeprefix("sha256:")
        return labels


def spec_from_record(record_path: Path, arch: str | None = None) -> ImageSpec:
    rec = load_build_record(record_path)
    recipe = {"name": rec.recipe.name, "version": rec.recipe.version, "digest": rec.recipe.digest}
    variant = rec.variant
    prefix = "/" + rec.prefix.strip("/")
    epoch = rec.source_date_epoch
    install_root = Path(rec.install_root)
    tree = rec.tree.digest
    sources = tuple(sorted((s.file, s.sha256) for s in rec.sources))
    if not install_root.is_absolute():
        install_root = (record_path.parent / install_root).resolve()
    version = recipe.get("version") or prefix.rsplit("-", 1)[-1]
    expected = f"/usr/lib64/{recipe['name']}-{variant}-{version}"
    if prefix != expected:
        raise VerifyError(
            f"unexpected prefix {prefix} in {record_path}", f"images hold {expected}", "rebuild the variant"
        )
    return ImageSpec(
        variant=variant,
        version=version,
        prefix=prefix,
        install_root=install_root,
        epoch=epoch,
        arch=arch or rec.arch or host_arch(),  # a record without arch predates cross builds: this machine's
        os="linux",
        recipe=recipe,
        sources=sources,
        tree_digest=tree,
        pruned=rec.pruned.sha256 if rec.pruned else "",
    )


@dataclass(frozen=True)
class ImageResult:
    layout: Path
    manifest: Descriptor
    config_digest: str
    layer: LayerInfo
    name: str
    seconds: float


def write_image(spec: ImageSpec, output: Path, compression: str = "gzip") -> ImageResult:
    """Write the layout into a temp dir beside `output`, then move it into place."""
    import time

    start = time.monotonic()
    output = output.resolve()
    with staged_dir(output, _replace_dir) as tmpdir:
        layout = Layout(tmpdir)
        layout.init()
        tmp_layer = tmpdir / "blobs" / "sha256" / ".layer.tmp"
        with open(tmp_layer, "wb") as f:
            layer = write_layer(f, spec.install_root, spec.prefix, spec.epoch, compression)
        os.replace(tmp_layer, layout.blob_path(layer.digest))
        labels = spec.labels()
        created = times.iso(spec.epoch)
        config = {
            "architecture": spec.arch,
            "os": spec.os,
            "created": created,
            "config": {"Labels": labels},
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
            "history": [{"created": created, "created_by": f"hermetic image llvm --variant {spec.variant}"}],
        }
        config_bytes = canonical_json(config)
        config_digest = layout.put_bytes(config_bytes)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {"mediaType": MT_CONFIG, "digest": config_digest, "size": len(config_bytes)},
            "layers": [{"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size}],
            "annotations": {k: v for k, v in labels.items() if k.startswith("org.opencontainers.image.")},
        }
        manifest_bytes = canonical_json(manifest)
        desc = Descriptor(
            MT_MANIFEST,
            layout.put_bytes(manifest_bytes),
            len(manifest_bytes),
            platform={"architecture": spec.arch, "os": spec.os},
            annotations={REF_NAME: spec.name},
        )
        layout.write_index([desc])
    return ImageResult(output, desc, config_digest, layer, spec.name, time.monotonic() - start)


def replacer(option: str) -> Callable[[Path, Path], None]:
    """How a finished layout goes into place; refusals name `option`, the one that chose the directory."""

    def replace(src: Path, dest: Path) -> None:
        """Move a finished directory into place, replacing an older layout at dest."""
        if dest.is_symlink() or dest.is_file():
            raise UsageError(f"{dest} exists and is not a directory", "", f"choose another {option} directory")
        if dest.exists():
            if any(dest.iterdir()) and not (dest / "oci-layout").exists():
                raise UsageError(
                    f"{dest} exists and is not an image layout",
                    "hermetic only replaces directories it wrote; nothing was written there",
                    f"choose an empty or new {option} directory",
                )
            old = dest.with_name(f".{dest.name}.old{os.getpid()}")
            os.replace(dest, old)
            os.replace(src, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(src, dest)

    return replace


_replace_dir = replacer("--output")
