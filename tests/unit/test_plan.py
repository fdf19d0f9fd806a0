"""The plan is pure: it is computed and printed before anything runs, and each step says honestly what it will do."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import ROOT, hermetic
from hermetic.model.settings import Settings
from hermetic.plan import pipeline as plan

pytestmark = pytest.mark.unit


def _settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(root=ROOT, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work", quiet=True, **kw)  # type: ignore[arg-type]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_planning_runs_nothing(tmp_path: Path) -> None:
    logged: list[str] = []
    job = plan.plan_all(_settings(tmp_path, toolchain="zig"), logged.append)
    assert _files(tmp_path) == [] and logged == []
    states = {s.key: s.state for s in job.steps}
    # nothing cached, nothing built: every step of the default (NVPTX) variant has to run
    assert states == {k: plan.RUN for k in ("toolchain", "fetch", "wheelhouse", "prune", "build", "image", "wheel")}


def test_the_host_toolchain_is_not_fetched_and_says_what_its_digests_prove(tmp_path: Path) -> None:
    step = plan.plan_all(_settings(tmp_path, toolchain="host"), lambda m: None).step("toolchain")
    assert step.state == plan.SKIP and "only on this distribution" in step.detail
    zig = plan.plan_all(_settings(tmp_path, toolchain="zig"), lambda m: None)
    assert zig.step("build").inputs_digest != plan.plan_all(
        _settings(tmp_path, toolchain="host"), lambda m: None).step("build").inputs_digest


def test_each_step_has_its_own_inputs_digest(tmp_path: Path) -> None:
    job = plan.plan_all(_settings(tmp_path), lambda m: None)
    digests = [s.inputs_digest for s in job.steps]
    assert len(set(digests)) == len(digests)
    # and they are stable: the same inputs plan to the same digests from another work dir
    again = plan.plan_all(_settings(tmp_path / "elsewhere"), lambda m: None)
    assert [s.inputs_digest for s in again.steps] == digests


def test_variant_without_nvptx_skips_the_wheel_with_its_reason(tmp_path: Path) -> None:
    job = plan.plan_all(_settings(tmp_path, variant="support"), lambda m: None)
    step = job.step("wheel")
    assert step.state == plan.SKIP and "compiler needs the target NVPTX, which support leaves out" in step.detail
    # the wheelhouse holds the build's CMake and Ninja: every build needs it
    assert job.step("wheelhouse").state == plan.RUN and "pinned wheels missing" in job.step("wheelhouse").detail


def test_build_plan_is_the_main_plan_narrowed(tmp_path: Path) -> None:
    full = plan.plan_all(_settings(tmp_path), lambda m: None)
    narrowed = full.upto("build")
    assert [s.key for s in narrowed.steps] == ["toolchain", "fetch", "wheelhouse", "prune", "build"]
    assert narrowed.step("build") == full.step("build")


def test_options_change_the_build_digest_and_force_says_why(tmp_path: Path) -> None:
    s = _settings(tmp_path, variant="support")
    base = plan.plan_all(s, lambda m: None).step("build")
    other = plan.plan_all(s, lambda m: None, overrides={"targets": "NVPTX"}).step("build")
    assert base.inputs_digest != other.inputs_digest
    forced = plan.plan_all(s, lambda m: None, force=True).step("build")
    assert forced.state == plan.RUN and "--force" in forced.detail


def test_source_path_skips_fetch_and_prune(tmp_path: Path) -> None:
    archive = tmp_path / "src.tar.xz"
    archive.write_bytes(b"not really an archive")
    job = plan.plan_all(_settings(tmp_path), lambda m: None, str(archive))
    assert job.step("fetch").state == plan.SKIP and job.step("prune").state == plan.SKIP


def test_plan_is_printed_before_anything_runs(tmp_path: Path) -> None:
    """`hermetic all` with no way to fetch: the plan is on stdout, then the fetch step fails."""
    proc = hermetic(
        "all", "--variant", "support", "--cache", str(tmp_path / "c"), "--work-dir", str(tmp_path / "w"),
        "--no-urls", "--no-apt", "--toolchain", "zig", check=False, env={"HOME": str(tmp_path)},
    )
    assert proc.stdout.startswith("plan:\n")
    lines = proc.stdout.splitlines()
    assert "[run ] toolchain zig" in lines[1] and "from nowhere: all origins are off" in lines[1]
    assert "[run ] fetch source" in lines[2] and "from nowhere: all origins are off" in lines[2]
    assert "[run ] fetch wheelhouse" in lines[3] and "[skip] wheel (none)" in lines[7]
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").rglob("record.json"))


def test_build_llvm_prints_its_plan_on_stderr(tmp_path: Path) -> None:
    proc = hermetic(
        "build", "llvm", "--variant", "support", "--cache", str(tmp_path / "c"), "--work-dir", str(tmp_path / "w"),
        "--no-urls", "--no-apt", check=False, env={"HOME": str(tmp_path)},
    )
    assert proc.stdout == "" and proc.stderr.startswith("plan:\n")
    assert "build llvm-support" in proc.stderr and proc.returncode == 4


def test_a_cached_pruned_source_needs_no_release_archive(tmp_path: Path) -> None:
    """What a bundle feeds: the pruned subset and its pruned.json, not the release; the build reads the subset."""
    import json

    from hermetic.build.llvm import BuildStep
    from hermetic.core.digests import file_sha256
    from hermetic.fetch import prune
    from hermetic.model import recipe

    settings = _settings(tmp_path, variant="support", toolchain="host")
    rec = recipe.load(ROOT / "recipes")
    variant = recipe.resolve_variant(rec, "support")
    archive = rec.archives[0]
    dest = prune.pruned_path(settings.cache_dir, rec, archive, variant)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"a pruned archive")
    meta = {"file": dest.name, "path": "/elsewhere/" + dest.name, "sha256": file_sha256(dest), "size": 16,
            "key": "k" * 64, "variant": "support",
            "from": {"file": archive.file, "sha256": archive.sha256, "origin": "apt:x"}}
    dest.with_name("pruned.json").write_text(json.dumps(meta))
    job = plan.plan_all(settings, lambda m: None)
    assert job.step("prune").state == plan.DONE
    assert job.step("fetch").state == plan.SKIP and "pruned source is cached" in job.step("fetch").detail
    got = BuildStep().source(job.ctx)  # what the build step takes: the cached subset
    assert got.source_archive == dest and got.source_sha256 == meta["sha256"]
    # a subset that no longer matches its pruned.json is not taken (and the release is then needed)
    dest.write_bytes(b"a changed archive")
    assert prune.cached_pruned(settings.cache_dir, rec, variant, rec.archives, lambda m: None) is None
