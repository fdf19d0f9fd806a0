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
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hermetic.core.errors import UsageError, VerifyError
from hermetic.oci.http import document_limit, too_large
from hermetic.oci.types import (
    INDEX_TYPES,
    MALFORMED,
    MANIFEST_TYPES,
    MT_CONFIG,
    MT_INDEX,
    OCI_LAYOUT_VERSION,
    Descriptor,
    host_arch,
    parse_json,
    sha256_digest,
    split_digest,
)


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


def fill_blobs(dest: Layout, src: Layout, root: Descriptor) -> int:
    """Copy into `dest` every blob reachable from `root` that `dest` lacks (images merged into an index; another
    builder's layout, which comes back without the layers the receiver has): each checked against its digest
    first; how many were copied."""
    copied = 0
    todo = [root]
    while todo:
        desc = todo.pop()
        path = src.verify_blob_file(desc)
        target = dest.blob_path(desc.digest)
        if not target.exists():
            tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
            shutil.copyfile(path, tmp)
            os.replace(tmp, target)
            copied += 1
        if desc.media_type in INDEX_TYPES or desc.media_type in MANIFEST_TYPES:
            todo.extend(src.children(desc))
    return copied


# -- building an image from a record ----------------------------------------------


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
