"""Rebuild an artifact from what was recorded about it, and compare the bits.

`hermetic verify` takes an LLVM build record, an OCI image layout or a wheel,
rebuilds it in a new directory under another umask and (necessarily) at a
later wall-clock time, with the same SOURCE_DATE_EPOCH, and compares digests:
pruned source, install tree, image manifest, wheel. A match is reported with
both digests. A mismatch names the differing files (from hermetic's own
listings) and shows what differs in them (from diffoscope, run on the two
outputs), keeps the rebuild for inspection and exits with the verify code.

What is rebuilt comes from the record: recipe (checked by digest against this
checkout), variant and resolved options, the release archive and the pruned
archive (by sha256). An image pulled from a registry with its attestations
can be verified without any local record: its provenance says the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.attest import attach as attest
from hermetic.attest import provenance
from hermetic.build.llvm import BuildStep
from hermetic.core import platforms, times
from hermetic.core.digests import file_sha256
from hermetic.core.errors import HermeticError, UsageError, VerifyError
from hermetic.core.log import stderr_log
from hermetic.fetch import prune, sources
from hermetic.model import recipe, record, toolchains
from hermetic.oci import referrers
from hermetic.oci.image import spec_from_record, write_image
from hermetic.oci.layout import Layout
from hermetic.plan.context import Context, Source
from hermetic.verify import differences
from hermetic.verify.report import DIFF_LINES, SHOWN_FILES, Comparison, Mismatch, Report

__all__ = ["DIFF_LINES", "SHOWN_FILES", "Comparison", "Mismatch", "Report", "verify"]

if TYPE_CHECKING:
    from hermetic.build.wheel import Interpreter
    from hermetic.core.log import Log
    from hermetic.model.artifacts import Artifact
    from hermetic.model.settings import Settings

# -- conditions of the rebuild -------------------------------------------------------------------------------


def other_umask(current: int) -> int:
    return 0o027 if current != 0o027 else 0o077


@contextlib.contextmanager
def rebuild_conditions(report: Report) -> Iterator[None]:
    """Another umask for the rebuild (sandbox.run still gives build steps 022); restored afterwards."""
    old = os.umask(0o022)
    new = other_umask(old)
    os.umask(new)
    report.conditions.update(
        {
            "umask": f"{new:04o}",
            "original_umask": f"{old:04o}",
            "rebuild_started": times.iso(time.time()),
            "rebuild_dir": str(report.rebuild_dir),
        }
    )
    try:
        yield
    finally:
        os.umask(old)


def default_rebuild_dir(settings: Settings, name: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return settings.work_dir / "verify" / f"{name}-{stamp}-{os.getpid()}"


def _fresh_dir(path: Path, avoid: list[Path]) -> Path:
    path = path.absolute()
    for other in avoid:
        o = other.absolute()
        if path == o or o in path.parents or path in o.parents:
            raise UsageError(
                f"the rebuild directory {path} overlaps the original {o}",
                "a rebuild must happen somewhere else to show that the location does not matter",
                "pass another --rebuild-dir",
            )
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{path} exists and is not empty", "", "pass a new --rebuild-dir")
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- LLVM: from a record (or a provenance that says the same) -----------------------------------------------


@dataclass(frozen=True)
class PrunedRef:
    """The pruned source a rebuild must reproduce."""

    file: str
    sha256: str
    path: str  # where the original lies; "" when only a provenance says what it was


@dataclass(frozen=True)
class RebuildSpec:
    """What an LLVM install tree is rebuilt from: its build record, or an image's provenance saying the same."""

    recipe_digest: str
    variant: str
    options: tuple[tuple[str, str], ...]
    sources: tuple[record.SourceOrigin, ...]
    source_archive: record.SourceArchive | None
    pruned: PrunedRef | None
    source_date_epoch: int | None
    inputs_digest: str
    tree_digest: str
    tree_files: tuple[record.TreeEntry, ...]  # empty when only a provenance is known
    prefix: str
    install_root: str  # "" when only a provenance is known
    finished: str | None
    toolchain: record.ToolchainRef = record.HOST_TOOLCHAIN  # the pinned toolchain it was built with
    version: str = ""  # the LLVM release; "" in provenances that do not name it: the recipe's default

    @classmethod
    def of_record(cls, rec: record.BuildRecord) -> RebuildSpec:
        pruned = PrunedRef(rec.pruned.file, rec.pruned.sha256, rec.pruned.path) if rec.pruned else None
        return cls(
            recipe_digest=rec.recipe.digest, variant=rec.variant, options=rec.options, sources=rec.sources,
            source_archive=rec.source_archive, pruned=pruned, source_date_epoch=rec.source_date_epoch,
            inputs_digest=rec.inputs_digest, tree_digest=rec.tree.digest, tree_files=rec.tree.files,
            prefix=rec.prefix, install_root=rec.install_root, finished=rec.finished, toolchain=rec.toolchain_ref,
            version=rec.recipe.version,
        )


def _llvm_spec_from_provenance(statement: Mapping[str, Any], labels: Mapping[str, str]) -> RebuildSpec:
    """What the LLVM build behind an image was, from its SLSA provenance."""
    problems = provenance.check_statement(statement)
    if problems:
        raise VerifyError("the image's provenance is malformed", "; ".join(problems), "attest the image again")
    bd = statement["predicate"]["buildDefinition"]
    ext, internal = bd["externalParameters"], bd.get("internalParameters") or {}
    deps = bd.get("resolvedDependencies") or []
    role = {str((d.get("annotations") or {}).get("role", "")): d for d in deps}
    sources_ = tuple(
        record.SourceOrigin(str(d["name"]), str(d["digest"]["sha256"]), str((d.get("annotations") or {}).get("origin", "")))
        for d in deps
        if (d.get("annotations") or {}).get("role") == "release-source"
    )
    pruned = role.get("pruned-source")
    epoch = internal.get("sourceDateEpoch")
    tc = ext.get("toolchain")  # absent from provenances written before it existed: all built by the host's compiler
    return RebuildSpec(
        toolchain=record.ToolchainRef.from_mapping(tc) if isinstance(tc, Mapping) else record.HOST_TOOLCHAIN,
        recipe_digest=str((ext["recipe"].get("digest") or {}).get(provenance.RECIPE_DIGEST, "")),
        version=str(ext["recipe"].get("version") or ""),
        variant=str(ext["variant"]),
        options=tuple(sorted((str(k), str(v)) for k, v in (ext.get("options") or {}).items())),
        sources=sources_,
        source_archive=None,
        pruned=PrunedRef(str(pruned["name"]), str(pruned["digest"]["sha256"]), "") if pruned else None,
        source_date_epoch=int(epoch) if epoch is not None else None,
        inputs_digest=str(internal.get("inputsDigest", "")),
        tree_digest=labels.get(attest.LABEL + "tree.digest", ""),
        tree_files=(),
        prefix=labels.get(attest.LABEL + "prefix", ""),
        install_root="",
        finished=(statement["predicate"].get("runDetails") or {}).get("metadata", {}).get("finishedOn"),
    )


def _release_archive(
    settings: Settings, rec: recipe.Recipe, want: record.SourceOrigin | record.SourceArchive | None, log: Log
) -> sources.CachedArchive:
    """The very release archive the record names (either accepted archive would do for a build, not for a prune)."""
    want_sha = want.sha256 if want else None
    for a in rec.archives:
        if a.sha256 == want_sha:
            p = sources.cache_path(settings.cache_dir, a)
            if p.is_file():
                return sources.CachedArchive(a, p, want.origin if isinstance(want, record.SourceOrigin) else "cache")
    got = sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)
    if want and want.sha256 and got.archive.sha256 != want.sha256:
        log(f"verify: {want.file} is not available; pruning {got.archive.file} instead")
    return got


def _recorded_toolchain(settings: Settings, want: record.ToolchainRef) -> toolchains.Toolchain:
    """This checkout's toolchain of the recorded name and target; refused when its pinned identity differs."""
    try:
        tc = toolchains.select_recorded(toolchains.load(settings.toolchain_dir), want.name, want.target, want.glibc)
    except UsageError as exc:
        raise VerifyError(
            f"this checkout cannot select the toolchain the artifact was built with ({want.label})",
            f"{exc.what}{': ' + exc.why if exc.why else ''}",
            "check out the commit the artifact was built from (or pass --root of such a checkout), then verify again",
        ) from exc
    have = record.ToolchainRef.from_mapping(tc.identity())
    if have != want:
        theirs, ours = want.as_json(), have.as_json()
        fields = sorted(k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k))
        raise VerifyError(
            "the toolchain in this checkout is not the one the artifact was built with",
            f"built with {want.label}; this checkout pins {have.label} (differs in {', '.join(fields)}); "
            "builds of different toolchains are not compared",
            "check out the commit the artifact was built from (or pass --root of such a checkout), then verify again",
        )
    return tc


def _rebuild_llvm(
    settings: Settings, spec: RebuildSpec, root: Path, report: Report, reuse_pruned: bool, log: Log,
    from_release: bool = False,
) -> record.BuildRecord:
    """Rebuild the install tree described by `spec` under root; returns the new record.

    from_release: build from the whole release archive instead of the pruned subset (which is
    still pruned again and compared): a tree that matches then shows that pruning dropped nothing
    the build reads, for users who do not want to trust the pruning step.
    """

    rec = recipe.load_at(settings.llvm_recipe_dir, spec.version or None, settings.root)
    want_recipe = spec.recipe_digest
    if want_recipe != rec.digest():
        raise VerifyError(
            "the recipe in this checkout is not the one the artifact was built with",
            f"recipe digest {rec.digest()} here, {want_recipe or 'none'} recorded",
            "check out the commit the artifact was built from (or pass --root of such a checkout), then verify again",
        )
    tc = _recorded_toolchain(settings, spec.toolchain)
    report.conditions["toolchain"] = tc.label
    epoch = spec.source_date_epoch
    if epoch is not None and epoch != rec.source_date_epoch:
        raise VerifyError("SOURCE_DATE_EPOCH differs", f"{rec.source_date_epoch} here, {epoch} recorded", "")
    report.conditions["source_date_epoch"] = rec.source_date_epoch
    variant = recipe.resolve_variant(rec, spec.variant, dict(spec.options))
    wanted_sources = list(spec.sources)
    pruned = spec.pruned

    if pruned:
        src = _release_archive(settings, rec, wanted_sources[0] if wanted_sources else None, log)
        cached = prune.pruned_path(settings.cache_dir, rec, src.archive, variant)
        if reuse_pruned and cached.is_file() and file_sha256(cached) == pruned.sha256:
            path, note = cached, "reused from the cache (--reuse-pruned), sha256 checked"
        else:
            path = root / "source" / (pruned.file or cached.name)
            log(f"verify: pruning {src.archive.file} again")
            prune.prune(src, rec, variant, path, log)
            note = f"pruned again from {src.archive.file}"
        digest = file_sha256(path)
        report.comparisons.append(Comparison("pruned source", "sha256:" + pruned.sha256, "sha256:" + digest, note))
        if digest != pruned.sha256:
            raise _mismatch(report, settings, Path(pruned.path), path, log)
        meta = record.PrunedSource(
            file=path.name, path=str(path), sha256=digest, size=path.stat().st_size,
            key=prune.prune_key(src.archive, variant, rec.prune), source=record.SourceOrigin.from_json(src.as_json()),
            variant=variant.name,
        ).as_json()
        outputs: dict[str, Any] = {"fetch": src, "prune": meta}
    else:
        archive = spec.source_archive or (wanted_sources[0] if wanted_sources else None)
        src = _release_archive(settings, rec, archive, log)
        outputs = {"fetch": src}

    # The build step of `hermetic all`, with a context of its own: never through a compile cache or compile hosts
    # (a host's wrong compiler would show here too): the rebuild is what checks a tree built with one (a poisoned
    # entry shows here). The recorded release.
    rebuilt_settings = dataclasses.replace(
        settings, work_dir=root / "work", compile_cache=None, distribute=None, llvm_version=rec.version
    )
    arch = toolchains.target_arch(tc)
    ctx = Context(rebuilt_settings, log, rec, variant, tc, arch, arch != platforms.machine_arch(),
                  Source("pruned" if pruned else "full"), outputs=outputs)
    step = BuildStep()
    want_inputs = spec.inputs_digest
    if want_inputs and step.inputs_digest(ctx) != want_inputs:
        raise VerifyError(
            "the build inputs differ from the recorded ones",
            f"inputs digest {step.inputs_digest(ctx)} now, {want_inputs} recorded (recipe, variant and source match: "
            "toolchain/ must have changed)",
            "check out the commit the artifact was built from, then verify again",
        )
    # The recorded inputs are checked above; --from-release then builds the same recipe, variant and
    # toolchain from the release archive they were pruned from.
    report.conditions["source"] = f"release archive {src.archive.file} (--from-release)" if from_release else "as recorded"
    new = step.run(dataclasses.replace(ctx, source=Source("full")) if from_release else ctx)
    note = f"built from the whole {src.archive.file}, not the pruned subset" if from_release and pruned else ""
    report.comparisons.append(Comparison("install tree", spec.tree_digest, new.tree.digest, note))
    return new


def _llvm_differences(spec: RebuildSpec, new: record.BuildRecord) -> tuple[list[str], int]:
    old_files = spec.tree_files
    new_files = new.tree.files
    if not old_files:
        return [], len(new_files)
    diffs = record.compare_trees(list(old_files), list(new_files))
    return diffs, max(len(old_files), len(new_files))


def shared_compiles(rec: record.BuildRecord) -> tuple[str, str] | None:
    """(why, fix) for a build whose objects came (partly) from a compile cache or compile hosts, else None.

    The rebuild compiles every file here, so where the trees differ those are what to suspect first: a cache
    entry is keyed by the compiler's declared identity, its arguments and the source, never checked against
    the object it holds, so an entry written by a client with another compiler under the same identity, or
    planted, gives a wrong object that ccache cannot tell (a damaged one fails ccache's own checksum and is
    compiled again).
    """
    why, fix = [], []
    cache, dist = rec.compile_cache, rec.distributed
    hits = cache.stats.hits if cache is not None and cache.stats is not None else 0
    if cache is not None and hits:
        total = hits + (cache.stats.misses if cache.stats else 0)
        why.append(f"the recorded build took {hits} of its {total} compiles from the compile cache {cache.url} "
                   "without compiling them, and this rebuild compiled every file here without it: a wrong entry in "
                   "that cache (written for the same key from another source or compiler, or planted) is the "
                   "likely cause")
        fix.append(f"do not use that tree; rebuild it with --no-compile-cache --force; find the entries behind the "
                   f"differing files (`ccache --inspect` / `--extract-result` on {cache.url}'s entries) and clear "
                   "the cache, or take write access from whoever wrote them")
    if dist is not None and dist.remote:
        hosts = ", ".join(h.address for h in dist.hosts if h.compiles)
        why.append(f"{dist.remote} of its files were compiled on compile hosts ({hosts}): a host whose compiler "
                   "answers to the name but differs is the other suspect")
        fix.append("check the hosts' `hermetic toolchain compile-host` setup, and rebuild with --no-distribute --force")
    return ("; ".join(why), "; ".join(fix)) if why else None


def verify_llvm(
    settings: Settings, record_path: Path, report: Report, reuse_pruned: bool, log: Log, from_release: bool = False
) -> None:
    rec = record.load_build_record(record_path)
    spec = RebuildSpec.of_record(rec)
    report.suspect = shared_compiles(rec)
    report.conditions["original_dir"] = spec.install_root
    report.conditions["original_finished"] = times.iso(record_path.stat().st_mtime)
    root = _fresh_dir(report.rebuild_dir, [Path(spec.install_root).parent])
    with rebuild_conditions(report):
        new = _rebuild_llvm(settings, spec, root, report, reuse_pruned, log, from_release)
    if not report.matches:
        report.differences, report.entries = _llvm_differences(spec, new)
        raise _mismatch(report, settings, Path(spec.install_root), Path(new.install_root), log)
    report.entries = len(new.tree.files)


# -- images --------------------------------------------------------------------------------------------------


def _image_spec(settings: Settings, layout: Layout, facts: Any, record_arg: Path | None) -> tuple[RebuildSpec, str]:
    """What the image was built from: its record (given, or in the work dir), else its own provenance."""
    if record_arg is not None:
        return RebuildSpec.of_record(record.load_build_record(record_arg)), str(record_arg)
    try:
        path = attest.record_for_image(facts, settings.work_dir)
        return RebuildSpec.of_record(record.load_build_record(path)), str(path)
    except UsageError as no_record:
        why = no_record.why
    found = referrers.referrers(layout, subject=facts.manifest_digest, artifact_type=provenance.MEDIA_TYPE)
    if not found:
        raise UsageError(
            f"nothing says what {facts.name} was built from",
            f"{why}, and the layout holds no provenance",
            "pass --record PATH, or pull the image with --with-attestations",
        )
    statement = json.loads(found[0].read())
    if facts.manifest_digest.removeprefix("sha256:") not in provenance.subject_sha256s(statement):
        raise VerifyError(
            f"the provenance in {layout.path} is not about {facts.manifest_digest}",
            f"its subjects: {provenance.subject_sha256s(statement)}",
            "pull the image and its attestations again",
        )
    return _llvm_spec_from_provenance(statement, facts.labels), f"provenance {found[0].digest}"


def verify_image(
    settings: Settings, layout_path: Path, report: Report, record_arg: Path | None, reuse_pruned: bool,
    arch: str | None, log: Log, from_release: bool = False,
) -> None:
    layout = Layout(layout_path)
    layout.verify()
    facts, _ = attest.image_facts(layout, arch)
    spec, source = _image_spec(settings, layout, facts, record_arg)
    report.artifact = f"{facts.name} ({layout_path}; built from {source})"
    want_tree = facts.labels.get(attest.LABEL + "tree.digest", "")
    if spec.tree_digest != want_tree:
        raise VerifyError(
            f"{source} is not the build of {facts.name}",
            f"it records tree {spec.tree_digest}, the image's label says {want_tree}",
            "pass the record.json the image was written from",
        )
    report.conditions["original_dir"] = str(layout_path.absolute())
    finished = spec.finished
    report.conditions["original_finished"] = finished or times.iso((layout_path / "index.json").stat().st_mtime)
    avoid = [layout_path, *([Path(spec.install_root).parent] if spec.install_root else [])]
    root = _fresh_dir(report.rebuild_dir, avoid)
    compression = "zstd" if any("zstd" in mt for mt, _, _ in facts.layers) else "gzip"
    with rebuild_conditions(report):
        new = _rebuild_llvm(settings, spec, root, report, reuse_pruned, log, from_release)
        built = recipe.load_at(settings.llvm_recipe_dir, new.recipe.version, settings.root)
        new_record = root / "work" / built.build_path(new.variant) / "record.json"
        image_spec = spec_from_record(new_record, arch=facts.arch)
        if from_release and spec.pruned:
            # Built from the release archive, the tree stands for the pruned subset the image names,
            # which was pruned again and matched above: the image says so as the original does.
            image_spec = dataclasses.replace(image_spec, pruned=spec.pruned.sha256)
        image = write_image(image_spec, root / "image" / facts.name, compression)
    report.comparisons.append(Comparison("image manifest", facts.manifest_digest, image.manifest.digest))
    report.entries = len(new.tree.files)
    if not report.matches:
        tree_diffs, _ = _llvm_differences(spec, new)
        compare = _stage_image_pair(layout, facts, Layout(image.layout), root / "compare")
        report.differences = tree_diffs or differences.listing_differences(
            differences.layer_listing(compare[0] / "layer.tar.gz"), differences.layer_listing(compare[1] / "layer.tar.gz")
        ) or differences.json_differences(compare)
        raise _mismatch(report, settings, compare[0], compare[1], log)


def _stage_image_pair(old: Layout, facts: Any, new: Layout, where: Path) -> tuple[Path, Path]:
    """The manifest, config and layer of both images under readable names, for diffoscope."""
    new_facts, _ = attest.image_facts(new, facts.arch)
    out = []
    for label, layout, f in (("original", old, facts), ("rebuilt", new, new_facts)):
        d = where / label
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(layout.blob_path(f.manifest_digest), d / "manifest.json")
        shutil.copyfile(layout.blob_path(f.config_digest), d / "config.json")
        for i, (_, digest, _) in enumerate(f.layers):
            shutil.copyfile(layout.blob_path(digest), d / ("layer.tar.gz" if i == 0 else f"layer{i}.tar.gz"))
        out.append(d)
    return out[0], out[1]


# -- wheels --------------------------------------------------------------------------------------------------


def verify_wheel(settings: Settings, path: Path, report: Report, log: Log) -> None:
    from hermetic.build import wheel

    art = attest.find_wheel(path)
    wrec = art.record
    report.artifact = f"{art.wheel.name} ({art.record_path})"
    report.conditions["original_dir"] = str(art.wheel.parent)
    report.conditions["original_finished"] = times.iso(art.record_path.stat().st_mtime)
    report.conditions["source_date_epoch"] = wrec.source_date_epoch
    # a third-party recipe's source is its pinned sdist, fetched and hashed again; the compiler core's, the recorded directory
    project = None if wrec.project.sdist else Path(wrec.project.path)
    prefix = Path(wrec.llvm.prefix)
    wheelhouse = Path(wrec.wheelhouse) if wrec.wheelhouse and Path(wrec.wheelhouse).is_dir() else None
    # The recorded compiler and interpreter, refused before building where this checkout or machine has other ones.
    want = wrec.toolchain_ref
    tc = _recorded_toolchain(settings, want)
    report.conditions["toolchain"] = tc.label
    python = _recorded_python(wrec)
    root = _fresh_dir(report.rebuild_dir, [art.wheel.parent])
    # the architecture the wheel was built for: the toolchain's target (a cross-built wheel's is not this machine's)
    rebuilt_settings = dataclasses.replace(settings, work_dir=root / "work", toolchain=want.name, glibc=want.glibc or None,
                                           arch=toolchains.target_arch(tc))
    with rebuild_conditions(report):
        job = wheel.plan(rebuilt_settings, project, prefix, root / "dist", wheelhouse, python=python, warn=log,
                         recipe_name=wrec.project.recipe, log=log)
        if job.toolchain.identity() != tc.identity():
            raise VerifyError(
                f"{art.wheel.name} cannot be rebuilt with the toolchain it was built with",
                f"built with {want.label}; its LLVM at {prefix} now asks for {job.toolchain.label}",
                "verify with the LLVM tree the wheel was built against",
            )
        checks = [
            ("build requirements", job.requirements.digest(), wrec.build_requirements.digest),
            (f"wheel recipe {wrec.project.recipe}", job.recipe.digest(), wrec.recipe_digest),
            ("SOURCE_DATE_EPOCH", str(job.epoch), str(wrec.source_date_epoch)),
            ("LLVM version", job.llvm.version, wrec.llvm.version),
        ]
        changed = [f"{what}: {now} now, {then} recorded" for what, now, then in checks if now != then]
        if changed:
            raise VerifyError(
                f"the inputs of {art.wheel.name} changed since it was built",
                "; ".join(changed),
                "check out the commit (and LLVM) the wheel was built with, then verify again",
            )
        new = wheel.build_wheel(rebuilt_settings, job, log)
    report.comparisons.append(Comparison("wheel", "sha256:" + wrec.sha256, "sha256:" + new.sha256))
    rebuilt = root / "dist" / new.wheel
    if report.matches:
        report.entries = len(differences.zip_listing(rebuilt)) - 1
        return
    old_listing = differences.zip_listing(art.wheel) if art.wheel.is_file() else {}
    new_listing = differences.zip_listing(rebuilt)
    report.entries = max(len(old_listing), len(new_listing)) - 1
    report.differences = differences.listing_differences(old_listing, new_listing) if old_listing else []
    if new.wheel != wrec.wheel:
        report.differences.insert(0, f"file name: {wrec.wheel} recorded, {new.wheel} rebuilt")
    raise _mismatch(report, settings, art.wheel, rebuilt, log)


def _recorded_python(wrec: record.WheelRecord) -> Interpreter:
    """The interpreter the wheel was built with: the recorded one, else one of the same X.Y version here."""
    from hermetic.build import wheel

    py = wrec.python
    want = tuple(int(x) for x in py.version.split(".")[:2])
    got = wheel.probe_interpreter(py.executable) if py.executable else None
    if got is None or got.xy != want:
        current = wheel.current_interpreter()
        if current.xy == want:
            return current
        try:
            got = wheel.resolve_interpreter(f"{want[0]}.{want[1]}")
        except UsageError:
            got = None
    if got is None or got.xy != want:
        raise VerifyError(
            f"no Python {py.version} here to rebuild {wrec.wheel} with",
            f"it was built with {py.executable or 'Python ' + py.version} (tag {py.tag}), which is not on this machine",
            f"verify where python{want[0]}.{want[1]} is on PATH (or its recorded path exists)",
        )
    return got


def _mismatch(report: Report, settings: Settings, old: Path, new: Path, log: Log) -> Mismatch:
    log("verify: outputs differ; running diffoscope")
    report.diffoscope = differences.run_diffoscope(old, new, report.rebuild_dir / "diffoscope")
    differing = [c for c in report.comparisons if not c.matches]
    first = report.differences[0] if report.differences else ""
    why = (f"{len(report.differences)} differing entr{'y' if len(report.differences) == 1 else 'ies'}"
           + (f", the first: {first}" if first else ""))
    fix = f"the build is not reproducible; read the diffoscope report; the rebuild is kept in {report.rebuild_dir}"
    if report.suspect:
        why = f"{why}; {report.suspect[0]}"
        fix = f"{report.suspect[1]}; the diffoscope report shows what differs; the rebuild is kept in {report.rebuild_dir}"
    return Mismatch(report, f"the rebuild of {report.artifact} differs: {', '.join(c.what for c in differing)}", why, fix)


# -- entry point ---------------------------------------------------------------------------------------------


def verify(
    settings: Settings,
    artifact: Artifact,
    rebuild: Callable[[Report, Log], None],
    *,
    rebuild_dir: Path | None = None,
    keep: bool = False,
    log: Log | None = None,
) -> Report:
    """Rebuild and compare with the kind's `rebuild` (verify_llvm, verify_image, verify_wheel, as the caller's
    table says); returns the report on a match, raises VerifyError (with `.report`) on a mismatch."""
    log = log or stderr_log()
    kind = artifact.kind.value
    report = Report(str(artifact.path), kind, (rebuild_dir or default_rebuild_dir(settings, kind)).absolute())
    started = time.monotonic()
    try:
        rebuild(report, log)
    except HermeticError as exc:
        report.seconds = time.monotonic() - started
        if isinstance(exc, Mismatch):
            raise
        if report.rebuild_dir.is_dir() and not keep and not report.comparisons:
            shutil.rmtree(report.rebuild_dir, ignore_errors=True)
        raise
    report.seconds = time.monotonic() - started
    if report.matches and not keep:
        shutil.rmtree(report.rebuild_dir, ignore_errors=True)
        report.kept = False
    return report
