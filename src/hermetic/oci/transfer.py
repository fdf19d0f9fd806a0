"""An OCI distribution client: push an image layout to a registry, pull one back.

Push order is what keeps a registry consistent when it fails half way: every
blob is uploaded (or found, or mounted from another repository), then every
blob is confirmed present with HEAD, and only then is the manifest (the tag)
written. A push that dies leaves at worst unreferenced blobs, never a tag that
points at missing ones; rerunning it skips what is already there.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.core.errors import RegistryError, UsageError, VerifyError
from hermetic.core.staging import staged_dir
from hermetic.oci.http import document_limit, too_large
from hermetic.oci.layer import layer_diff_id
from hermetic.oci.layout import Layout, check_platform, pick_root, replacer, select_manifest
from hermetic.oci.registry import DEFAULT_CHUNK
from hermetic.oci.types import INDEX_TYPES, MALFORMED, MANIFEST_TYPES, REF_NAME, Descriptor, host_arch, sha256_digest

if TYPE_CHECKING:
    from hermetic.oci.registry import RegistryClient, Stats
    from hermetic.oci.types import LayoutRef, Reference

# -- push and pull ------------------------------------------------------------------


@dataclass(frozen=True)
class PushResult:
    reference: Reference
    digest: str
    stats: Stats


def push_layout(
    client: RegistryClient,
    layout: Layout,
    ref: Reference,
    *,
    chunk_size: int = DEFAULT_CHUNK,
    mount_from: Sequence[str] = (),
    ref_name: str | None = None,
) -> PushResult:
    if chunk_size < 1:
        raise UsageError(f"invalid chunk size {chunk_size}", "", "give a positive number of bytes")
    start = time.monotonic()
    root = pick_root(layout, ref_name)
    layout.verify(root)  # a damaged layout is refused before anything goes out
    if ref.digest and ref.digest != root.digest:
        raise UsageError(
            f"{ref} names digest {ref.digest}",
            f"the layout's image is {root.digest}",
            "push by tag, or name the right digest",
        )
    repo = ref.repository
    client.scopes = [f"repository:{repo}:pull,push", *(f"repository:{m}:pull" for m in mount_from if m != repo)]

    def push_manifest(desc: Descriptor, reference: str) -> None:
        children = layout.children(desc)
        if desc.media_type in INDEX_TYPES:
            for child in children:
                push_manifest(child, child.digest)
        else:
            for blob in children:
                client.push_blob(repo, blob, layout.blob_path(blob.digest), chunk_size, mount_from)
        # the tag goes last, and only once every blob it names is confirmed present
        missing = [
            c.digest
            for c in children
            if not (
                client.manifest_exists(repo, c.digest)
                if c.media_type in INDEX_TYPES + MANIFEST_TYPES
                else client.blob_exists(repo, c.digest)
            )
        ]
        if missing:
            raise RegistryError(
                f"{client.registry}/{repo} lost blobs during the push",
                "missing: " + ", ".join(missing),
                "rerun the push; the tag was not written",
            )
        client.put_manifest(repo, reference, desc.media_type, layout.read_blob(desc))

    push_manifest(root, ref.reference)
    client.stats.seconds = time.monotonic() - start
    return PushResult(ref, root.digest, client.stats)


def pull_layout(
    client: RegistryClient, ref: Reference, dest: Path, arch: str | None = None, option: str = "--layout"
) -> Descriptor:
    """Pull one platform's image into an OCI layout at dest (written beside it, moved into place)."""
    repo = ref.repository
    media_type, body = client.get_manifest(repo, ref.reference)
    digest = sha256_digest(body)
    if ref.digest and digest != ref.digest:
        raise VerifyError(
            f"manifest of {ref} does not match its digest",
            f"received {digest}",
            "the registry serves damaged data; nothing was kept",
        )
    dest = dest.absolute()
    with staged_dir(dest, replacer(option)) as tmpdir:
        layout = Layout(tmpdir)
        layout.init()
        platform = None
        want = arch  # a single manifest is checked only against an --arch the user gave
        if media_type in INDEX_TYPES:
            layout.put_bytes(body)
            index = Descriptor(media_type, digest, len(body))
            want = arch or host_arch()
            choices = layout.children(index)
            chosen = next(
                (
                    c
                    for c in choices
                    if (c.platform or {}).get("architecture") == want
                    and (c.platform or {}).get("os", "linux") == "linux"
                ),
                None,
            )
            if chosen is None:
                have = ", ".join(
                    f"{(c.platform or {}).get('os')}/{(c.platform or {}).get('architecture')}" for c in choices
                )
                raise UsageError(
                    f"{ref} has no linux/{want} image",
                    f"it has: {have}",
                    "pass --arch, or build the image for this platform",
                )
            platform = dict(chosen.platform or {})
            media_type, body = client.get_manifest(repo, chosen.digest)
            digest = sha256_digest(body)
            if digest != chosen.digest:
                raise VerifyError(
                    f"manifest {chosen.digest} of {ref} does not match its digest", f"received {digest}", "the registry serves damaged data; nothing was kept"
                )
            layout.blob_path(index.digest).unlink()
        if media_type not in MANIFEST_TYPES:
            raise VerifyError(f"{ref} is a {media_type[:80]!r}, not an image", "", "pull an image (a manifest or an index of them)")
        layout.put_bytes(body)
        manifest = Descriptor(media_type, digest, len(body))
        children = layout.children(manifest)
        # the config first: it says what platform this is before any layer is downloaded
        if children[0].size > document_limit():
            raise too_large(f"the image config of {ref}", children[0].size, document_limit())
        client.fetch_blob(repo, children[0], layout.blob_path(children[0].digest))
        config = layout.read_json(children[0])
        check_platform(config, want, "linux", str(ref))
        for blob in children[1:]:
            client.fetch_blob(repo, blob, layout.blob_path(blob.digest))
        if platform is None:
            platform = {"architecture": str(config.get("architecture", "")), "os": str(config.get("os", ""))}
        verify_diff_ids(layout, config, children[1:])
        name = ref.tag or ref.repository.rsplit("/", 1)[-1]
        final = Descriptor(media_type, digest, len(body), platform=platform, annotations={REF_NAME: name})
        layout.write_index([final])
    return final


def pull_local(source: LayoutRef, dest: Path, arch: str | None = None, option: str = "--layout") -> Descriptor:
    """One platform's image of a local layout, copied into a new layout at dest: the twin of pull_layout.

    The same checks as a registry pull: every blob is hashed as it is copied, the
    config's diff_ids are checked against the layers, a requested --arch against
    the config; the result is then unpacked by the same `unpack_layout`.
    """
    src = Layout(source.path)
    root = pick_root(src, source.tag or None)
    manifest = select_manifest(src, root, arch)
    if manifest.media_type not in MANIFEST_TYPES:
        raise VerifyError(f"{source} is a {manifest.media_type[:80]!r}, not an image", "", "pull an image (a manifest or an index of them)")
    if root.media_type in INDEX_TYPES:
        plat = dict(manifest.platform or {})
    else:
        plat = {}
    dest = dest.absolute()
    if dest.exists() and dest.resolve() == source.path.resolve():
        raise UsageError(
            f"{dest} is the layout being pulled from",
            "pulling a layout onto itself would replace the source with a copy of part of it",
            f"choose another {option} directory",
        )
    with staged_dir(dest, replacer(option)) as tmpdir:
        out = Layout(tmpdir)
        out.init()
        body = src.read_blob(manifest)  # verified against the digest the index names
        out.put_bytes(body)
        children = out.children(Descriptor(manifest.media_type, manifest.digest, manifest.size))
        config = src.read_json(children[0])
        out.put_bytes(src.read_blob(children[0]))
        # as pull_layout: a platform taken from an index is checked against its config too
        check_platform(config, arch or (host_arch() if root.media_type in INDEX_TYPES else None), "linux", str(source))
        for blob in children[1:]:
            _copy_verified(src, blob, out.blob_path(blob.digest))
        verify_diff_ids(out, config, children[1:])
        if not plat:
            plat = {"architecture": str(config.get("architecture", "")), "os": str(config.get("os", ""))}
        name = source.tag or root.ref_name or source.path.name
        final = Descriptor(manifest.media_type, manifest.digest, manifest.size, platform=plat, annotations={REF_NAME: name})
        out.write_index([final])
    return final


def _copy_verified(src: Layout, desc: Descriptor, dest: Path) -> None:
    """Copy a blob, hashing what is written; refuse it unless size and digest match the descriptor."""
    path = src.blob_path(desc.digest)
    h = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as f, open(dest, "wb") as out:
            while block := f.read(1 << 20):
                h.update(block)
                size += len(block)
                if size > desc.size:
                    break
                out.write(block)
    except FileNotFoundError as exc:
        raise VerifyError(
            f"blob {desc.digest} is missing from {src.path}", str(path), "rewrite or re-pull the layout"
        ) from exc
    if size != desc.size or "sha256:" + h.hexdigest() != desc.digest:
        raise VerifyError(
            f"blob {desc.digest} in {src.path} does not match its digest",
            f"it has {'more than ' if size > desc.size else ''}{size} bytes and digest sha256:{h.hexdigest()}; "
            f"expected {desc.size} bytes",
            "the layout was modified or damaged: rewrite it with `hermetic image` or pull it again; nothing was kept",
        )


def verify_diff_ids(layout: Layout, config: Mapping[str, Any], layers: Sequence[Descriptor]) -> None:


    try:
        ids = [str(d) for d in config["rootfs"]["diff_ids"]]
    except (KeyError, TypeError) as exc:
        raise VerifyError("image config has no rootfs.diff_ids", str(exc), MALFORMED) from exc
    if len(ids) != len(layers):
        raise VerifyError("image config and manifest disagree", f"{len(ids)} diff_ids for {len(layers)} layers", MALFORMED)
    for layer, expected in zip(layers, ids, strict=True):
        actual = layer_diff_id(layout.blob_path(layer.digest), layer.media_type)
        if actual != expected:
            raise VerifyError(
                f"layer {layer.digest} does not match its diff_id",
                f"uncompressed digest {actual}, config says {expected}",
                "the image is inconsistent; nothing was kept",
            )


