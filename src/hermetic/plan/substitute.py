"""Substitution: pull a finished, verified build instead of building it again.

Builds are reproducible, so a tree built elsewhere from the same inputs is the tree this machine
would build. `hermetic push` publishes an image under an extra tag derived from its build's inputs
digest (`inputs_tag`); before building, the plan asks each substitute for that tag (`find`), and the
build step pulls the image (`install`) instead of building when one answers.

Why a tag and not an annotation found through the referrers API: a tag is one GET on any
registry (docker-registry 2.8 has no referrers API, and listing tags or referrers to search
annotations is a walk over the whole repository), and the tag is only a hint: what the image is
gets checked after the pull, against the provenance and the build record pushed with it.

Nothing from a substitute is trusted until it is checked: every blob against its digest and every
layer against its diff_id (the pull code of oci/transfer.py), the provenance must be about this
image and name the same inputs digest and toolchain, the build record must be the one the
provenance names and describe the same inputs, and the unpacked tree must have the recorded
digest. Anything else refuses the substitute (`Refused`, one line saying what disagreed) and the
build runs as if there were none.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.attest import provenance
from hermetic.build import swap
from hermetic.core.errors import RegistryError, UsageError, VerifyError
from hermetic.model import record
from hermetic.oci import referrers, referrers_registry
from hermetic.oci.layout import Layout, _replace_dir
from hermetic.oci.registry import ACCEPT, _Response, make_client
from hermetic.oci.transfer import pull_layout
from hermetic.oci.types import LABEL_PREFIX, REF_NAME, Descriptor, Reference, sha256_digest
from hermetic.oci.unpack import unpack_layout
from hermetic.plan.context import Refused

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.settings import Substitute
    from hermetic.oci.registry import RegistryClient
    from hermetic.plan.context import Context

TAG_PREFIX = "inputs-"
TAG_HEX = 32  # 128 bits of the inputs digest: a tag to find a candidate by, never the proof of one
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def inputs_tag(inputs_digest: str) -> str:
    """The tag an image is found by: `inputs-` + the first 32 hex digits of its build's inputs digest."""
    hexpart = inputs_digest.removeprefix("sha256:")
    if not _HEX64.match(hexpart):
        raise UsageError(f"invalid inputs digest {inputs_digest!r}", "expected 64 lowercase hex digits", "")
    return TAG_PREFIX + hexpart[:TAG_HEX]


@dataclass(frozen=True)
class Hit:
    """A substitute that has an image under the inputs tag of a build."""

    substitute: Substitute
    tag: str
    digest: str  # of the manifest (or index) the tag named when it was looked up

    @property
    def ref(self) -> str:
        """REGISTRY/REPO@sha256:…, what the plan and the record name."""
        return f"{self.substitute.registry}/{self.substitute.repository}@{self.digest}"


def publish(client: RegistryClient, layout: Layout, repo: str, images: list[Descriptor]) -> list[tuple[str, str]]:
    """Tag each pushed image by its build's inputs digest; returns (tag, image digest) pairs.

    Called after the images and their attestations are up, so a machine that finds the tag finds the
    provenance and build record too. The inputs digest comes from the build record attached to each
    image; an image without one (attested before records were attached) gets no tag.
    """
    out = []
    for image in images:
        attached = referrers.referrers(layout, subject=image.digest, artifact_type=record.RECORD_MEDIA_TYPE)
        if not attached:
            continue
        rec = record.BuildRecord.from_json(json.loads(attached[-1].read()), f"the build record of {image.digest}")
        tag = inputs_tag(rec.inputs_digest)
        client.put_manifest(repo, tag, image.media_type, layout.read_blob(image))
        out.append((tag, image.digest))
    return out


def _client(sub: Substitute, environ: Mapping[str, str], **kw: Any) -> RegistryClient:
    return make_client(Reference(sub.registry, sub.repository), insecure=sub.insecure, environ=environ, **kw)


def find(
    substitutes: tuple[Substitute, ...], inputs_digest: str, environ: Mapping[str, str], log: Log
) -> Hit | None:
    """The first substitute holding an image under the build's inputs tag; an unreachable one is warned about and passed."""
    tag = inputs_tag(inputs_digest)
    for sub in substitutes:
        # One quick try each: a substitute that does not answer must not cost more than the lookup is worth.
        client = _client(sub, environ, retries=1, backoff=0.2, timeout=15)
        try:
            resp = client.request(
                "GET", f"/v2/{sub.repository}/manifests/{tag}", headers={"Accept": ACCEPT},
                ok=(200, 404), scopes=[f"repository:{sub.repository}:pull"],
            )
        except RegistryError as exc:
            log(f"warning: substitute {sub} not asked: {exc.what}" + (f" ({exc.why})" if exc.why else ""))
            continue
        finally:
            client.close()
        if isinstance(resp, _Response) and resp.status == 200:
            return Hit(sub, tag, sha256_digest(resp.body))
    return None


def check_provenance(
    statement: Any, image_digest: str, inputs_digest: str, toolchain: Mapping[str, str]
) -> list[str]:
    """What in a provenance disagrees with the build it should stand in for; empty when nothing does.

    The inputs digest covers recipe, variant, options, source, toolchain/ and the compiler's
    identity; the toolchain is compared on its own too, so a refusal can say which part differs.
    """
    problems = provenance.check_statement(statement)
    if problems:
        return [f"the provenance is malformed: {'; '.join(problems)}"]
    out = []
    subjects = provenance.subject_sha256s(statement)
    if image_digest.removeprefix("sha256:") not in subjects:
        out.append(f"the provenance is about {', '.join('sha256:' + s[:12] + '…' for s in subjects)}, not this image")
    build = statement["predicate"]["buildDefinition"]
    theirs = str((build.get("internalParameters") or {}).get("inputsDigest", ""))
    if theirs != inputs_digest:
        out.append(f"the provenance names inputs digest {theirs[:16] or '(none)'}…, this build's is {inputs_digest[:16]}…")
    named = (build.get("externalParameters") or {}).get("toolchain") or {}
    for key in ("name", "version", "sha256", "target"):
        if str(named.get(key, "")) != str(toolchain.get(key, "")):
            out.append(
                f"the provenance names toolchain {key} {named.get(key) or '(none)'!s}, "
                f"this build's is {toolchain.get(key) or '(none)'!s}"
            )
    return out


def check_record(
    rec: record.BuildRecord, statement: Mapping[str, Any], record_sha256: str, inputs_digest: str,
    toolchain: Mapping[str, str], tree_label: str,
) -> list[str]:
    """What in the pushed build record disagrees with its provenance, its image or this build."""
    out = []
    named = [
        (b.get("digest") or {}).get("sha256")
        for b in statement["predicate"]["runDetails"].get("byproducts") or []
        if (b.get("annotations") or {}).get("role") == "build-record"
    ]
    if record_sha256 not in named:
        out.append(f"the build record (sha256 {record_sha256[:12]}…) is not the one the provenance names")
    if rec.inputs_digest != inputs_digest:
        out.append(f"the build record names inputs digest {rec.inputs_digest[:16]}…, this build's is {inputs_digest[:16]}…")
    if rec.toolchain_ref.as_json() != dict(toolchain):
        out.append(f"the build record names toolchain {rec.toolchain_ref.label}, this build's differs")
    if rec.tree.digest != tree_label:
        out.append(f"the build record names tree {rec.tree.digest}, the image holds {tree_label or '(no label)'}")
    return out


def _one(refs: list[referrers.Referrer], media_type: str, what: str, ref: str) -> referrers.Referrer:
    mine = [r for r in refs if r.artifact_type == media_type]
    if not mine:
        raise Refused(f"substitute {ref} refused: it has no {what} attached", "", "")
    return mine[-1]


def install(
    hit: Hit,
    out: Path,
    images: Path,
    image_name: str,
    inputs_digest: str,
    toolchain: Mapping[str, str],
    arch: str,
    environ: Mapping[str, str],
    log: Log,
) -> record.BuildRecord:
    """Pull, verify and swap in the substitute's tree as the build of `out` (WORK/llvm/<variant>).

    The pulled layout is kept as images/<image_name>, where `hermetic image llvm` finds it. Raises
    Refused, or RegistryError when the substitute fails mid-pull; either way nothing of it is kept.
    """
    swap.recover(out)
    new = swap.staging_dir(out)
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    try:
        rec = _install_into(new, out, hit, inputs_digest, toolchain, arch, environ, log)
        # The layout goes first (a cache of what the record names); the swap is the commit point.
        images.mkdir(parents=True, exist_ok=True)
        _replace_dir(new / "image", images / image_name)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    swap.swap_in(new, out, rec.tree.digest)
    return rec


def _install_into(
    new: Path, out: Path, hit: Hit, inputs_digest: str, toolchain: Mapping[str, str], arch: str,
    environ: Mapping[str, str], log: Log,
) -> record.BuildRecord:
    sub = hit.substitute
    client = _client(sub, environ)
    layout_dir = new / "image"
    try:
        try:
            desc = pull_layout(client, Reference(sub.registry, sub.repository, digest=hit.digest), layout_dir, arch=arch)
            layout = Layout(layout_dir)
            refs, _ = referrers_registry.pull_referrers(client, sub.repository, desc.digest, layout)
        except (VerifyError, UsageError) as exc:  # a digest or diff_id that fails, a platform that is not ours
            raise Refused(f"substitute {hit.ref} refused: {exc.what}" + (f" ({exc.why})" if exc.why else ""), "", "") from exc
    finally:
        client.close()
    ref = f"{sub.registry}/{sub.repository}@{desc.digest}"
    prov = _one(refs, provenance.MEDIA_TYPE, "provenance", ref)
    pushed_record = _one(refs, record.RECORD_MEDIA_TYPE, "build record", ref)
    try:
        statement = json.loads(prov.read())
        record_bytes = pushed_record.read()
        rec = record.BuildRecord.from_json(json.loads(record_bytes), f"the build record of {ref}")
    except (ValueError, VerifyError) as exc:
        raise Refused(f"substitute {ref} refused: its attestations are unreadable ({exc})", "", "") from exc
    config = layout.read_json(layout.children(desc)[0])
    tree_label = str(((config.get("config") or {}).get("Labels") or {}).get(LABEL_PREFIX + "tree.digest", ""))
    problems = check_provenance(statement, desc.digest, inputs_digest, toolchain)
    if not problems:
        problems = check_record(rec, statement, sha256_digest(record_bytes).removeprefix("sha256:"), inputs_digest,
                                toolchain, tree_label)
    if problems:
        raise Refused(f"substitute {ref} refused: {'; '.join(problems)}", "", "")
    try:
        unpack_layout(layout, new / "install", progress=log)
    except VerifyError as exc:  # an entry outside the prefix, a link that escapes, a device node
        raise Refused(f"substitute {ref} refused: {exc.what}" + (f" ({exc.why})" if exc.why else ""), "", "") from exc
    got = record.tree_digest(record.scan_tree(new / "install"))
    if got != rec.tree.digest:
        raise Refused(f"substitute {ref} refused: the unpacked tree is {got}, its build record says {rec.tree.digest}", "", "")
    (new / "test_package").mkdir()  # the test ran where the tree was built; the record says what it gave
    mine = dataclasses.replace(rec, install_root=str(out / "install"), substituted=ref, substitute_refused=None)
    record.write_record(new / "record.json", mine)
    # Found again by the name `hermetic image llvm` writes, not by the inputs tag it was pulled by.
    layout.write_index([Descriptor(desc.media_type, desc.digest, desc.size, platform=desc.platform,
                                   annotations={REF_NAME: _image_name_of(layout, desc)})])
    return mine


def _image_name_of(layout: Layout, desc: Descriptor) -> str:
    config = layout.read_json(layout.children(desc)[0])
    title = str(((config.get("config") or {}).get("Labels") or {}).get("org.opencontainers.image.title", ""))
    return f"{title}-{config.get('os', 'linux')}-{config.get('architecture', '')}"


class Finder:
    """The substitutes of a job (settings.substitutes), asked with the credentials of `environ`: what a command
    gives its plan (plan.context.Substitutes) so the build step may pull instead of build."""

    def __init__(self, substitutes: tuple[Substitute, ...], environ: Mapping[str, str]) -> None:
        self.substitutes = substitutes
        self.environ = environ

    def find(self, inputs_digest: str, log: Log) -> Hit | None:
        return find(self.substitutes, inputs_digest, self.environ, log)

    def install(self, hit: Hit, ctx: Context, inputs_digest: str) -> record.BuildRecord:
        name = f"{ctx.recipe.title(ctx.variant.name)}-linux-{ctx.arch}"
        return install(hit, ctx.build_dir, ctx.image_dir, name, inputs_digest, ctx.toolchain.identity(), ctx.arch,
                       self.environ, ctx.log)
