"""--arch: the OCI names as data, the profile pair of a cross build, the refusal with the host
compiler, the emulator check and the test_package's account of its run.

The machine is pinned to x86_64 where the answer depends on it, so these hold on any machine.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import ROOT, hermetic
from hermetic.build import llvm, testrun, wrappers
from hermetic.core import platforms
from hermetic.core.errors import BuildError, EnvironmentError_, UsageError
from hermetic.model import recipe, record, toolchains
from hermetic.model.options import resolve
from hermetic.model.settings import Settings
from hermetic.oci.image import spec_from_record
from hermetic.plan import pipeline as plan
from schemas.examples import fake_llvm_build

pytestmark = pytest.mark.unit

QEMU_ARM64 = ["/usr/bin/qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu"]


@pytest.fixture
def on_amd64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platforms.platform, "machine", lambda: "x86_64")


def _zig(arch: str | None = None) -> toolchains.Toolchain:
    return toolchains.select(toolchains.load(ROOT / "toolchain"), "zig", None, arch)


# --- the names, as data ---------------------------------------------------------------


def test_oci_names_map_to_zig_conan_and_llvm_names() -> None:
    got = {p.oci: (p.zig, platforms.ARCHES[p.zig][0], p.llvm_triple) for p in platforms.PLATFORMS.values()}
    assert got == {
        "amd64": ("x86_64", "x86_64", "x86_64-unknown-linux-gnu"),
        "arm64": ("aarch64", "armv8", "aarch64-unknown-linux-gnu"),
    }
    # the pinned zig targets every platform the table names
    assert sorted(_zig().arches) == sorted(p.zig for p in platforms.PLATFORMS.values())
    assert platforms.PLATFORMS["arm64"].packages == ("qemu-user-static", "libc6-arm64-cross")


@pytest.mark.parametrize(("machine", "oci"), [("x86_64", "amd64"), ("AMD64", "amd64"), ("aarch64", "arm64"),
                                              ("arm64", "arm64"), ("riscv64", "riscv64")])
def test_the_machines_arch_by_its_oci_name(monkeypatch: pytest.MonkeyPatch, machine: str, oci: str) -> None:
    monkeypatch.setattr(platforms.platform, "machine", lambda: machine)
    assert platforms.machine_arch() == oci


def test_settings_take_arch_by_precedence_and_default_to_the_machine(tmp_path: Path, on_amd64: None) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.hermetic]\narch = "arm64"\n')
    assert resolve({"root": str(ROOT)}, {}, tmp_path).arch == "amd64"  # ROOT's pyproject names none: the machine's
    assert resolve({"root": str(tmp_path)}, {}, tmp_path).arch == "arm64"
    assert resolve({"root": str(tmp_path)}, {"HERMETIC_ARCH": "amd64"}, tmp_path).arch == "amd64"
    assert resolve({"root": str(tmp_path), "arch": "arm64"}, {"HERMETIC_ARCH": "amd64"}, tmp_path).arch == "arm64"


@pytest.mark.parametrize("bad", ["aarch64", "x86_64", "riscv64", "ARM64"])
def test_settings_refuse_other_names_with_the_valid_ones(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UsageError) as err:
        resolve({"root": str(ROOT), "arch": bad}, {}, tmp_path)
    assert "amd64, arm64" in err.value.fix


def test_settings_take_a_list_of_arches_in_order_each_once(tmp_path: Path, on_amd64: None) -> None:
    s = resolve({"root": str(ROOT), "arch": " arm64, amd64,arm64"}, {}, tmp_path)
    assert s.arches == ("arm64", "amd64") and s.arch == "arm64"
    (tmp_path / "pyproject.toml").write_text('[tool.hermetic]\narch = ["amd64", "arm64"]\n')
    assert resolve({"root": str(tmp_path)}, {}, tmp_path).arches == ("amd64", "arm64")
    assert resolve({"root": str(ROOT)}, {}, tmp_path).arches == ("amd64",)
    with pytest.raises(UsageError) as err:
        resolve({"root": str(ROOT), "arch": "amd64,aarch64"}, {}, tmp_path)
    assert "aarch64" in err.value.what and "amd64, arm64" in err.value.fix


def test_only_all_takes_several_arches(tmp_path: Path) -> None:
    proc = hermetic("build", "llvm", "--variant", "support", "--arch", "amd64,arm64", "--work-dir", str(tmp_path / "w"),
                    "--cache", str(tmp_path / "c"), check=False)
    assert proc.returncode == 2 and "builds for one architecture" in proc.stderr
    assert "hermetic all --arch amd64,arm64" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "w").exists() and not (tmp_path / "c").exists()


def test_all_plans_every_arch_and_the_index_before_it_runs_anything(tmp_path: Path) -> None:
    """Both plans and the index line are shown first; then the first step that needs the network fails
    (empty cache, no origins) without anything built, so a wrong list costs nothing."""
    work = tmp_path / "w"
    proc = hermetic("all", "--variant", "support", "--arch", "amd64,arm64", "--toolchain", "zig", "--work-dir", str(work),
                    "--cache", str(tmp_path / "c"), "--no-urls", "--no-apt", check=False)
    assert proc.returncode == 4, proc.stderr  # the source class: nothing to fetch from
    assert f"linux/amd64 (work dir {work / 'linux-amd64'}):" in proc.stdout
    assert f"linux/arm64 (work dir {work / 'linux-arm64'}):" in proc.stdout
    assert "linux/arm64 cross-built on" in proc.stdout or platforms.machine_arch() == "arm64"
    assert f"index: llvm-support for linux/amd64, linux/arm64 -> {work / 'images' / 'llvm-support-index'}" in proc.stdout
    assert proc.stdout.index("linux/arm64 (work dir") < proc.stdout.index("index: llvm-support")
    assert "Traceback" not in proc.stderr and not (work / "images").exists()


# --- toolchain selection --------------------------------------------------------------


def test_the_host_compiler_does_not_cross_compile(on_amd64: None) -> None:
    catalog = toolchains.load(ROOT / "toolchain")
    assert toolchains.select(catalog, "host", None, "x86_64").kind == "host"  # this machine's arch: fine
    with pytest.raises(UsageError) as err:
        toolchains.select(catalog, "host", None, "aarch64")
    assert "--arch arm64" in err.value.what and "--toolchain zig --arch arm64" in err.value.fix


def test_a_cross_build_has_a_build_machine_toolchain_and_a_native_one_none(on_amd64: None) -> None:
    assert toolchains.for_build_machine(_zig("x86_64")) is None
    assert toolchains.for_build_machine(toolchains.select(toolchains.load(ROOT / "toolchain"), "host")) is None
    target = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig", "2.17", "aarch64")
    build = toolchains.for_build_machine(target)
    assert build is not None and build.target == "x86_64-linux-gnu.2.17"
    assert replace(build, target=target.target) == target  # the same pinned wheel: only the target differs
    assert toolchains.target_arch(target) == "arm64" and toolchains.target_arch(build) == "amd64"


def test_a_cross_build_gets_a_profile_pair(tmp_path: Path, on_amd64: None) -> None:
    tc = _zig("aarch64")
    build = toolchains.for_build_machine(tc)
    out = tmp_path / "toolchain"
    prep = wrappers.prepare(tc, tmp_path / "zig", out, ROOT / "toolchain", tmp_path / "zc", build=build)
    assert prep.profile == out / "profile" and prep.build_profile == out / "build-machine" / "profile"
    host, machine = prep.profile.read_text().splitlines(), prep.build_profile.read_text().splitlines()
    assert "arch=armv8" in host and "user.hermetic:llvm_host_triple=aarch64-unknown-linux-gnu" in host
    assert "arch=x86_64" in machine and "user.hermetic:llvm_host_triple=x86_64-unknown-linux-gnu" in machine
    assert f'tools.build:compiler_executables={{"c": "{out}/build-machine/bin/cc", "cpp": "{out}/build-machine/bin/c++"}}' in machine
    assert f'"{out}/build-machine/zig-tools.cmake"]' in next(ln for ln in machine if "user_toolchain" in ln)
    assert "-target x86_64-linux-gnu.2.28 " in (out / "build-machine" / "bin" / "c++").read_text()
    assert "-target aarch64-linux-gnu.2.28 " in (out / "bin" / "c++").read_text()
    assert prep.env["CXX"] == str(out / "bin" / "c++")  # the environment's compiler is the target's


def test_a_native_build_gets_one_profile_as_before(tmp_path: Path, on_amd64: None) -> None:
    tc = _zig()
    prep = wrappers.prepare(tc, tmp_path / "zig", tmp_path / "out", ROOT / "toolchain", tmp_path / "zc",
                             build=toolchains.for_build_machine(tc))
    assert prep.build_profile is None and not (tmp_path / "out" / "build-machine").exists()


# --- digests and the plan -------------------------------------------------------------


def test_the_arch_is_in_the_build_digest_and_a_native_digest_keeps_its_formula(on_amd64: None) -> None:
    rec = recipe.load(ROOT / "recipes")
    variant = recipe.resolve_variant(rec, "support")
    src = llvm.source_identity("pruned")
    native = llvm.inputs_digest(rec, variant, src, _zig())
    assert llvm.inputs_digest(rec, variant, src, _zig("aarch64")) != native
    # what the digest of a native build hashed before cross builds existed: nothing added
    data = {"recipe": rec.digest(), "variant": variant.digest(), "source": src,
            "toolchain": llvm._toolchain_digest(ROOT / "toolchain"), "compiler": _zig().identity()}
    assert native == hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(root=ROOT, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work", quiet=True, **kw)  # type: ignore[arg-type]


def test_the_plan_says_the_arch_and_skips_a_foreign_wheel(tmp_path: Path, on_amd64: None) -> None:
    arm = plan.plan_all(_settings(tmp_path, toolchain="zig", arch="arm64"), lambda m: None)
    amd = plan.plan_all(_settings(tmp_path, toolchain="zig", arch="amd64"), lambda m: None)
    assert "linux/arm64 cross-built on amd64" in arm.step("build").detail
    assert "aarch64-linux-gnu.2.28" in arm.step("build").detail
    assert "linux/amd64," in amd.step("build").detail and "cross" not in amd.step("build").detail
    assert arm.step("build").inputs_digest != amd.step("build").inputs_digest
    assert arm.step("wheel").state == plan.SKIP and "no arm64 wheel here" in arm.step("wheel").detail
    assert amd.step("wheel").state == plan.RUN
    # the compiler is the same pinned wheel: fetching it is the same step
    assert arm.step("toolchain").state == amd.step("toolchain").state


def test_cli_refuses_arch_with_the_host_toolchain_and_unknown_names(tmp_path: Path) -> None:
    common = ["build", "llvm", "--variant", "support", "--work-dir", str(tmp_path / "w"), "--cache", str(tmp_path / "c")]
    other = "arm64" if platforms.machine_arch() != "arm64" else "amd64"
    proc = hermetic(*common, "--toolchain", "host", "--arch", other, check=False)
    assert proc.returncode == 2 and "host toolchain builds for this" in proc.stderr and "Traceback" not in proc.stderr
    # fetch refuses it before it downloads anything
    proc = hermetic("fetch", "--toolchain", "host", "--arch", other, "--cache", str(tmp_path / "c"), check=False)
    assert proc.returncode == 2 and "--toolchain zig" in proc.stderr and not (tmp_path / "c").exists()
    proc = hermetic(*common, "--arch", "sparc", check=False)
    assert proc.returncode == 2 and "use one of: amd64, arm64" in proc.stderr
    proc = hermetic(*common, "--toolchain", "zig", "--no-urls", "--no-apt", check=False, env={"HERMETIC_ARCH": other})
    assert f"linux/{other} cross-built" in proc.stderr


# --- running the test_package under the emulator -----------------------------------------


def test_a_missing_emulator_names_the_debian_packages(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no qemu on it
    with pytest.raises(EnvironmentError_) as err:
        toolchains.emulator("arm64")
    assert "qemu-aarch64-static is not on PATH" in err.value.what
    assert "apt-get install -y qemu-user-static libc6-arm64-cross" in err.value.fix


def test_a_missing_cross_libc_names_the_debian_packages(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    qemu = tmp_path / "bin" / "qemu-aarch64-static"
    qemu.parent.mkdir()
    qemu.write_text("#!/bin/sh\n")
    qemu.chmod(0o755)
    monkeypatch.setenv("PATH", str(qemu.parent))
    sysroot = tmp_path / "sysroot"
    plat = replace(platforms.PLATFORMS["arm64"], emulator=("qemu-aarch64-static", "-L", str(sysroot)))
    monkeypatch.setitem(platforms.PLATFORMS, "arm64", plat)
    with pytest.raises(EnvironmentError_) as err:
        toolchains.emulator("arm64")
    assert "holds no arm64 loader" in err.value.what and "libc6-arm64-cross" in err.value.fix
    (sysroot / "lib").mkdir(parents=True)
    (sysroot / "lib" / "ld-linux-aarch64.so.1").write_text("")
    assert toolchains.emulator("arm64") == (str(qemu), "-L", str(sysroot))


def _run_json(d: Path, emulator: list[str], output: str = "LLVM 19.1.7\n") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / testrun.TEST_RUN).write_text(json.dumps({"emulator": emulator, "output": output}))
    return d


def test_a_test_package_that_did_not_run_fails_the_build(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as err:
        testrun.test_run(tmp_path, tuple(QEMU_ARM64), tmp_path / "build.log")
    assert "did not run its program" in err.value.what and "build.log" in err.value.fix


def test_a_cross_build_test_package_must_have_run_under_its_emulator(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as err:
        testrun.test_run(_run_json(tmp_path / "a", []), tuple(QEMU_ARM64), tmp_path / "build.log")
    assert "ran with no emulator" in err.value.why
    ran = testrun.test_run(_run_json(tmp_path / "b", QEMU_ARM64), tuple(QEMU_ARM64), tmp_path / "build.log")
    assert ran == testrun.TestRun("LLVM 19.1.7", "qemu-aarch64-static -L /usr/aarch64-linux-gnu")
    assert testrun.test_run(_run_json(tmp_path / "c", []), None, tmp_path / "l") == testrun.TestRun("LLVM 19.1.7", None)
    with pytest.raises(BuildError):  # a native build's program under an emulator is not what was asked
        testrun.test_run(_run_json(tmp_path / "d", QEMU_ARM64), None, tmp_path / "l")


# --- the record and the image ----------------------------------------------------------


def test_the_record_carries_arch_and_how_the_test_ran_and_the_image_takes_its_arch(tmp_path: Path) -> None:
    path = fake_llvm_build(tmp_path / "a")
    old = json.loads(path.read_text())
    assert "arch" not in old and record.load_build_record(path).arch is None
    data = old | {"arch": "arm64"}
    data["test_package"] |= {"output": "LLVM 19.1.7", "emulator": "qemu-aarch64-static -L /usr/aarch64-linux-gnu"}
    path.write_text(json.dumps(data))
    rec = record.load_build_record(path)
    assert rec.arch == "arm64" and rec.as_json() == data
    assert rec.test_package.emulator == "qemu-aarch64-static -L /usr/aarch64-linux-gnu"
    assert spec_from_record(path).arch == "arm64"
    assert spec_from_record(path, arch="amd64").arch == "amd64"  # `image llvm --arch` still overrides
