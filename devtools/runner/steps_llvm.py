"""The runner's steps up to the LLVM trees: carried wheels and qemu, the builds, golden digests, ptxas, the tree packed."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import ClassVar

from . import bundle, golden
from .core import Context, Decision, State, Step, StepFailed, now, run, skip
from .facts import here_arch
from .records import BuildRecord, build_record, llvm_summary, variant_entry

PART_SIZE = 15 * 1024 * 1024  # what one device call brings back, with room
# tilec's own ptxas search (TILEC_PTXAS, CUDA_HOME, PATH, /usr/local/cuda, the nvidia wheels), run from its source
PTXAS_SEARCH = ("from tilec.backends.cuda.toolchain import find_ptxas; from tilec.settings import Settings; "
                "print(find_ptxas(Settings.from_env()) or '')")


def toolchain_args(ctx: Context) -> list[str]:
    opts = ctx.opts
    return [*(["--toolchain", opts.toolchain] if opts.toolchain else []),
            *(["--mirror", str(opts.mirror)] if opts.mirror else [])]


def source_args(ctx: Context, variant: str) -> list[str]:
    """Where a build's inputs come from: the bundle (its own variant from its pruned source as planned, another from
    that archive by path, as `support` builds from the nvptx subset), or the carried archive and wheelhouse."""
    opts, b = ctx.opts, ctx.bundle
    if opts.bundle is None:
        return ["--source", str(opts.source), *(["--wheelhouse", str(opts.wheelhouse)] if opts.wheelhouse else [])]
    if b is not None and variant == b.variant:
        return ["--bundle", str(opts.bundle)]
    source = ctx.bundle_source or ctx.work / "bundle-source" / (b.pruned["name"] if b else "PRUNED.tar.xz")
    return ["--bundle", str(opts.bundle), "--source", str(source)]


def build_args(ctx: Context, variant: str, work_dir: Path, *, toolchain: list[str] | None = None) -> list[str]:
    """`hermetic build llvm` of one variant from the bundle or the carried archive, offline, into `work_dir`."""
    opts = ctx.opts
    return ["build", "llvm", "--variant", variant, *source_args(ctx, variant), "--jobs", str(opts.jobs),
            "--offline", ctx.offline, "--work-dir", str(work_dir), "--cache", str(ctx.work / "cache"), "--no-apt",
            "--no-urls", *(toolchain_args(ctx) if toolchain is None else toolchain),
            *(["--arch", opts.arch] if opts.arch else []),
            *(["--llvm-recipe", opts.llvm_recipe] if opts.llvm_recipe else []),
            *(["--llvm-version", opts.llvm_version] if opts.llvm_version else [])]


def foreign(ctx: Context) -> bool:
    """Whether the tree is for another architecture than this machine's (its programs do not run here)."""
    return bool(ctx.opts.arch) and ctx.opts.arch != here_arch()


class InstallWheels(Step):
    """The carried wheels (conan and what the machine's Python lacks) into a private target, first on PYTHONPATH."""

    name = "install-wheels"

    def commands(self, ctx: Context) -> list[list[str]]:
        return [[ctx.python, "-m", "pip", "install", "--no-index", "--no-deps", "--target", str(ctx.work / "site"),
                 f"{ctx.opts.wheels}/*.whl"]]

    def run(self, ctx: Context) -> State:
        site, bin_dir = ctx.work / "site", ctx.work / "bin"
        for d in (site, bin_dir):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        wheels = sorted(ctx.opts.wheels.glob("*.whl")) if ctx.opts.wheels.is_dir() else []
        if wheels:
            ctx.sh([ctx.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--target", site, *wheels])
        ctx.site = site
        ctx.env["PYTHONPATH"] = os.pathsep.join(p for p in (ctx.env.get("PYTHONPATH", ""), str(site)) if p)
        # hermetic runs Conan with its own import path; this launcher is for running it by hand
        conan = bin_dir / "conan"
        conan.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{ctx.python}" '
                         '-m conans.conan "$@"\n')
        conan.chmod(0o755)
        ctx.env["PATH"] = f"{bin_dir}{os.pathsep}{ctx.env['PATH']}"
        ctx.sh([conan, "--version"])
        ctx.report.set("carried_wheels", [w.name for w in wheels])
        return State.OK


class InstallQemu(Step):
    """qemu-user and the cross loader for a cross build's test_package, where the machine has no Debian ones."""

    name = "install-qemu"

    def plan(self, ctx: Context) -> Decision:
        wanted = foreign(ctx) or (ctx.opts.bench and ctx.opts.bench_compare == "arch")
        if not wanted:
            return skip("no cross build")
        if ctx.opts.qemu is None:
            return skip("no --qemu directory: qemu-user-static and the cross loader must be on the machine")
        return run()

    def run(self, ctx: Context) -> State:
        assert ctx.opts.qemu is not None
        tarballs = sorted(ctx.opts.qemu.glob("qemu-*.tar.xz"))
        if not tarballs:
            raise StepFailed(f"no qemu-*.tar.xz in {ctx.opts.qemu}: tests/gpu/runner/qemu-carry.sh writes it")
        dest = ctx.work / "qemu"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        ctx.sh(["tar", "-C", dest, "-xJf", tarballs[0]])
        for d in sorted((dest / "usr").glob("*-linux-gnu")):
            # the loader path is fixed (-L /usr/TRIPLE), as Debian's libc6-*-cross installs it
            if not Path("/usr", d.name).exists():
                ctx.sh(["cp", "-a", d, "/usr/"])
        ctx.env["PATH"] = f"{dest / 'bin'}{os.pathsep}{ctx.env['PATH']}"
        ctx.note(f"qemu from {tarballs[0]}: {', '.join(p.name for p in (dest / 'bin').iterdir())}")
        return State.OK


def no_bundle(ctx: Context) -> Decision | None:
    """A build from a bundle the bundle step could not open is skipped (it would not build from the bundle)."""
    if ctx.opts.bundle is not None and ctx.bundle is None and not ctx.opts.dry_run:
        return skip("bundle failed")
    return None


class OpenBundle(Step):
    """--bundle: hermetic opens it (every blob checked against its digest) and lists it; its pruned source taken out
    for the variants it was not made for; the report names it by its manifest digest."""

    name = "bundle"
    needs = ("install-wheels",)  # hermetic's OCI code imports zstandard

    def plan(self, ctx: Context) -> Decision:
        if ctx.opts.bundle is None:
            return skip("no --bundle: the carried source, toolchain and wheelhouse")
        b = ctx.bundle
        return run(f"{b.name} {b.digest}" if b else str(ctx.opts.bundle))

    def commands(self, ctx: Context) -> list[list[str]]:
        return [["hermetic", "bundle-show", str(ctx.opts.bundle)]]

    def run(self, ctx: Context) -> State:
        assert ctx.opts.bundle is not None
        b = bundle.read(ctx.opts.bundle)
        shown = ctx.sh([ctx.python, "-m", "hermetic", "bundle-show", b.path], capture=True)
        if b.digest not in shown.splitlines()[0]:
            raise StepFailed(f"hermetic shows another bundle than its index.json names ({b.digest}): {shown[:200]!r}")
        ctx.bundle, ctx.bundle_source = b, bundle.take_source(b, ctx.work / "bundle-source")
        ctx.report.set("bundle", b.as_json())
        ctx.note(f"bundle {b.name} {b.digest}: {b.inputs} inputs, {b.size / 1e6:.1f} MB, made for {b.variant}")
        return State.OK


class BuildVariant(Step):
    """One LLVM variant from the carried pruned archive with the pinned toolchain, offline, by `hermetic build llvm`;
    its record copied beside the report and summarized in it."""

    needs = ("install-wheels",)
    report_key: ClassVar[str]
    record_file: ClassVar[str]

    def variant(self, ctx: Context) -> str:
        raise NotImplementedError

    def plan(self, ctx: Context) -> Decision:
        if ctx.opts.scale:
            return skip("--scale: the scale bench instead of the builds")
        return no_bundle(ctx) or run()

    def commands(self, ctx: Context) -> list[list[str]]:
        return [["hermetic", *build_args(ctx, self.variant(ctx), ctx.work / "hermetic")]]

    def run(self, ctx: Context) -> State:
        started, t0 = now(), time.monotonic()
        try:
            got = ctx.hermetic(*build_args(ctx, self.variant(ctx), ctx.work / "hermetic"))
        except StepFailed:
            show_build_log(ctx, ctx.work / "hermetic", t0)
            raise
        path = Path(got["record"])
        rec = build_record(path)
        shutil.copyfile(path, ctx.out / self.record_file)
        ctx.records[self.name], ctx.record_paths[self.name] = rec, path
        ctx.report.set(self.report_key, llvm_summary(rec))
        ctx.report.merge("variants", variant_entry(rec, round(time.monotonic() - t0, 1)))
        ctx.note(f"{rec.variant}: tree {rec.tree.digest} ({rec.toolchain_ref.label}), inputs {rec.inputs_digest}")
        planned_as(ctx, rec)
        # a record finished before this step started is an identical earlier build hermetic kept
        return State.DONE if rec.finished and rec.finished < started else State.OK


def planned_as(ctx: Context, rec: BuildRecord) -> None:
    """The bundle's own variant has the inputs digest of the bundle's plan: it built what the bundle was made for."""
    b = ctx.bundle
    if b is None or rec.variant != b.variant:
        return
    matches = rec.inputs_digest == b.build_inputs_digest
    ctx.report.merge("bundle", {"built": rec.variant, "build_inputs_digest": rec.inputs_digest,
                                "matches_plan": matches})
    if not matches:
        raise StepFailed(f"{rec.variant} built from the bundle has inputs digest {rec.inputs_digest}, not its plan's "
                         f"{b.build_inputs_digest}: another toolchain, architecture or release than it was made for?")


def show_build_log(ctx: Context, work_dir: Path, since: float) -> None:
    """The end of the build.log a failed build wrote, into the step's log."""
    wall_start = time.time() - (time.monotonic() - since)
    logs = [p for p in work_dir.glob("*/*/build.log") if p.stat().st_mtime >= wall_start]
    for log in sorted(logs, key=lambda p: p.stat().st_mtime)[-1:]:
        for line in log.read_text(errors="replace").splitlines()[-80:]:
            ctx.note(f"  build.log: {line}")


class BuildSupport(BuildVariant):
    """`support` first: minutes, and a tree digest of its own to compare across machines (its inputs digest names
    the nvptx-pruned archive, its tree digest does not)."""

    name = "build-support"
    report_key, record_file = "llvm_support", "support-record.json"

    def variant(self, ctx: Context) -> str:
        return "support"

    def plan(self, ctx: Context) -> Decision:
        return skip("--no-support") if not ctx.opts.support else super().plan(ctx)


class BuildLlvm(BuildVariant):
    name = "build-llvm"
    report_key, record_file = "llvm", "record.json"

    def variant(self, ctx: Context) -> str:
        return ctx.opts.variant


class Golden(Step):
    """Each tree built here against tests/golden/digests.json: a tree that differs fails this step (and only it)."""

    name = "golden"

    def plan(self, ctx: Context) -> Decision:
        if ctx.opts.scale:
            return skip("--scale: no builds of the runner's own")
        if not ctx.opts.golden.is_file():
            return skip(f"no {ctx.opts.golden}")
        if not ctx.opts.dry_run and not ctx.records:
            return skip("no tree was built")
        return run(f"each built tree against {ctx.opts.golden.name}")

    def run(self, ctx: Context) -> State:
        table = golden.load(ctx.opts.golden)
        differ = []
        for rec in ctx.records.values():
            got = golden.compare(rec, table, bool(ctx.opts.llvm_version), here_arch())
            ctx.report.merge("golden", {rec.variant: got})
            ctx.note(f"{rec.variant}: {got['status']} ({got['entry']}: {got.get('expected')} against {got['tree']})")
            if got["status"] == golden.DIFFERS:
                differ.append(f"{rec.variant} ({got['entry']})")
        if differ:
            raise StepFailed(f"trees or PTX differ from tests/golden/digests.json: {', '.join(differ)}")
        return State.OK


class Ptxas(Step):
    """The test_package's PTX assembled by ptxas (found by tilec's own search), its sha256 checked against the record."""

    name = "ptxas"
    needs = ("build-llvm",)

    def plan(self, ctx: Context) -> Decision:
        rec = ctx.records.get("build-llvm")
        if rec is None:
            return run("when the build's record lists test_package PTX")
        if not rec.test_package.ptx:
            return skip(f"the {rec.variant} test_package lowers no PTX (its record lists none)")
        return run()

    def run(self, ctx: Context) -> State:
        rec, path = ctx.records["build-llvm"], ctx.record_paths["build-llvm"]
        found = ctx.sh([ctx.python, "-c", PTXAS_SEARCH], env=ctx.env | {"PYTHONPATH": str(ctx.repo / "src" / "compiler")},
                       capture=True).strip()
        if not found:
            raise StepFailed("tilec finds no ptxas (TILEC_PTXAS, CUDA_HOME, PATH, /usr/local/cuda, nvidia wheels)")
        ctx.ptxas = Path(found)
        checks = [self._check(ctx, path.parent / "test_package" / p.file, p.sha256) for p in rec.test_package.ptx]
        ctx.report.set("ptxas_check", {"ptxas": found, "found_by": "tilec.backends.cuda.toolchain.find_ptxas",
                                       "files": checks, **checks[0]})
        bad = [str(c["ptx"]) for c in checks if not c["matches_record"]]
        if bad:
            raise StepFailed(f"PTX not as the record lists: {', '.join(bad)}")
        return State.OK

    def _check(self, ctx: Context, ptx: Path, sha256: str) -> dict[str, object]:
        if not ptx.is_file():
            raise StepFailed(f"the test_package wrote no PTX at {ptx}")
        arch = ptx.name.split(".")[1] if ptx.name.count(".") >= 2 else "sm_80"
        shutil.copyfile(ptx, ctx.out / ptx.name)
        cubin = ctx.work / ptx.with_suffix(".cubin").name
        assert ctx.ptxas is not None
        ctx.sh([ctx.ptxas, f"-arch={arch}", "-v", ptx, "-o", cubin], stdout=ctx.out / "ptxas.txt")
        got = hashlib.sha256(ptx.read_bytes()).hexdigest()
        return {"arch": arch, "ptx": ptx.name, "ptx_sha256": got, "matches_record": got == sha256,
                "cubin_size": cubin.stat().st_size,
                "output": (ctx.out / "ptxas.txt").read_text().strip().splitlines()}


class Pack(Step):
    """The install tree as one deterministic tar.xz, split into parts a device call can bring back."""

    name = "pack"
    needs = ("build-llvm",)

    def plan(self, ctx: Context) -> Decision:
        return skip("--no-pack") if not ctx.opts.pack else run()

    def run(self, ctx: Context) -> State:
        rec = ctx.records["build-llvm"]
        name = f"llvm-{rec.variant}-install.tar.xz"
        whole = ctx.work / name
        for old in ctx.out.glob(f"{name}.part-*"):
            old.unlink()
        tar = ["tar", "--sort=name", f"--mtime=@{rec.source_date_epoch}", "--owner=0", "--group=0", "--numeric-owner",
               "--format=gnu", "-C", rec.install_root, "-cf", "-", "usr"]
        ctx.note(f"$ {' '.join(tar)} | xz -T0 -6 > {whole}")
        with open(whole, "wb") as sink:
            producer = subprocess.Popen(tar, stdout=subprocess.PIPE)
            rc_xz = subprocess.run(["xz", "-T0", "-6"], stdin=producer.stdout, stdout=sink).returncode
            assert producer.stdout is not None
            producer.stdout.close()
            rc_tar = producer.wait()
        if rc_tar or rc_xz:
            raise StepFailed(f"packing the install tree failed (tar {rc_tar}, xz {rc_xz})", rc_tar or rc_xz)
        parts: list[dict[str, str]] = []
        with open(whole, "rb") as f:
            while block := f.read(PART_SIZE):
                part = ctx.out / f"{name}.part-{len(parts):02d}"
                part.write_bytes(block)
                parts.append({"file": part.name, "sha256": hashlib.sha256(block).hexdigest()})
        listing = "".join(f"{p['sha256']}  {p['file']}\n" for p in parts)
        (ctx.out / name.replace(".tar.xz", ".parts.sha256")).write_text(listing)
        sha = hashlib.sha256(whole.read_bytes()).hexdigest()
        ctx.report.set("install_tree_archive", {"file": name, "sha256": sha, "size": whole.stat().st_size, "parts": parts,
                                                "reassemble": f"cat {name}.part-* > {name} && sha256sum {name}"})
        return State.OK
