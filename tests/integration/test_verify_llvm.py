"""`hermetic verify` on the real `support` build: a clean rebuild matches, an injected timestamp is caught.

The match: the support image is pushed with its attestations, pulled into a
fresh layout, and verified from that layout alone (the provenance says what
to rebuild): pruned source, install tree and image manifest digests must all
match, rebuilt in another directory under another umask, later.

The mismatch: the host toolchain's compiler is the machine's (`--toolchain host`), and a `c++`
earlier on PATH runs the real one and then appends the wall clock to the build's generated
llvm-config.h, which is installed: a non-reproducible tool of the kind verify exists to catch.
(CMake and Ninja are pinned, so a fake cmake is no longer run.) Nothing in hermetic knows about
it; verify must name the file and show the line through diffoscope.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import hermetic
from hermetic.oci.layout import Layout, pick_root

pytestmark = pytest.mark.integration

JOBS = str(os.cpu_count() or 2)
HEADER = "usr/lib64/llvm-support-19.1.7/include/llvm/Config/llvm-config.h"
MARK = "hermetic-test-nondeterminism"


def _foreign_tools(d: Path) -> dict[str, str]:
    """A PATH whose first cmake and ninja are not the pinned ones (they would fail the build), and
    whose python3 finds yaml and pygments: LLVM's configure probes for both and writes the answer
    into LLVMConfig.cmake unless the recipe answers it."""
    bin_dir, site = d / "bin", d / "site"
    (site / "pygments" / "lexers").mkdir(parents=True)
    bin_dir.mkdir()
    for mod in ("yaml.py", "pygments/__init__.py", "pygments/lexers/__init__.py", "pygments/lexers/c_cpp.py"):
        (site / mod).write_text("")
    for tool in ("cmake", "ninja"):
        (bin_dir / tool).write_text("#!/bin/sh\necho 'cmake version 3.25.1'; exit 97\n")
        (bin_dir / tool).chmod(0o755)
    python = shutil.which("python3")
    (bin_dir / "python3").write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {python} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_verify_rebuilds_the_pulled_image_from_its_provenance(
    support_install: Path, registry: Any, source_cache: Path, tmp_path: Path
) -> None:
    layout = tmp_path / "image"
    hermetic("image", "llvm", "--record", str(support_install), "--output", str(layout))
    digest = pick_root(Layout(layout)).digest
    ref = f"{registry.host}/verify/llvm-support-19.1.7:19.1.7"
    hermetic("push", str(layout), ref, "--insecure")
    pulled = tmp_path / "pulled"
    hermetic("pull", ref, "--layout", str(pulled), "--insecure", "--with-attestations")

    rebuild = tmp_path / "elsewhere" / "rebuild"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    # A work dir that holds no record: what to rebuild can only come from the pulled provenance. The
    # rebuild also differs in every other way the tree could depend on, each of which would fail the
    # digest: another directory, cwd, umask and time, another cmake, ninja and python3 first on PATH
    # (a Python that finds yaml and pygments), and the whole release archive instead of the pruned one.
    # One rebuild carries them all: each LLVM build costs minutes of CI.
    proc = hermetic(
        "verify", str(pulled), "--work-dir", str(tmp_path / "empty-work"), "--cache", str(source_cache),
        "--rebuild-dir", str(rebuild), "--keep", "--json", "--jobs", JOBS, "--offline", "require", "--from-release",
        cwd=cwd, env=_foreign_tools(tmp_path / "foreign"),
    )
    report = json.loads(proc.stdout)
    print(f"\nverify {report['seconds']}s: " + ", ".join(f"{c['what']} {c['rebuilt']}" for c in report["comparisons"]))
    assert report["match"] is True and report["kind"] == "image"
    assert "built from provenance sha256:" in report["artifact"]
    got = {c["what"]: c for c in report["comparisons"]}
    assert set(got) == {"pruned source", "install tree", "image manifest"}
    rec = json.loads(support_install.read_text())
    assert got["pruned source"]["recorded"] == got["pruned source"]["rebuilt"] == "sha256:" + rec["pruned"]["sha256"]
    assert got["pruned source"]["note"].startswith("pruned again from")
    assert got["install tree"]["recorded"] == got["install tree"]["rebuilt"] == rec["tree"]["digest"]
    assert got["image manifest"]["recorded"] == got["image manifest"]["rebuilt"] == digest
    cond = report["conditions"]
    assert cond["umask"] != cond["original_umask"]
    assert cond["source_date_epoch"] == rec["source_date_epoch"]
    # ISO times to the second: a rebuild started in the second the fixture's build finished is still after it
    assert cond["rebuild_started"] >= cond["original_finished"]
    rebuilt = json.loads((rebuild / "work" / "llvm" / "support" / "record.json").read_text())
    assert rebuilt["install_root"] != rec["install_root"] and rebuilt["install_root"].startswith(str(rebuild))
    assert rebuilt["offline"]["enforced"] is True
    assert rebuilt["offline"]["method"] in ("netns", "userns+netns")
    # pruning drops only what the build never reads: this one read the whole release archive
    assert rebuilt["pruned"] is None and rebuilt["source_archive"]["sha256"] == rebuilt["sources"][0]["sha256"]
    assert got["install tree"]["note"].startswith("built from the whole ")
    assert cond["source"].endswith("(--from-release)")
    # the pinned tools ran, not the ones first on the user's PATH
    assert rebuilt["toolchain"]["cmake"] == rec["toolchain"]["cmake"] == "cmake version 4.4.4"
    # LLVM's configure ran the foreign python3 (which finds yaml and pygments): only the recipe's answer
    # to the module probe keeps LLVM_HAVE_OPT_VIEWER_MODULES, and so the tree, the same
    log = (rebuild / "work" / "llvm" / "support" / "build.log").read_text()
    assert f"Found Python3: {tmp_path / 'foreign' / 'bin' / 'python3'} " in log, "configure saw another Python"


def _nondeterministic_compiler(bin_dir: Path) -> Path:
    real = shutil.which("c++")
    assert real, "c++ is not installed"
    bin_dir.mkdir(parents=True)
    lock = bin_dir / "marked"  # outside the build: the first compile that sees the header marks it, once
    wrapper = bin_dir / "c++"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'{real!s} "$@" || exit $?\n'
        "for a do\n"
        "  case $a in\n"
        "    -I*)\n"
        '      h="${a#-I}/llvm/Config/llvm-config.h"\n'
        f'      if [ -f "$h" ] && mkdir "{lock}" 2>/dev/null; then\n'
        f"        printf '/* {MARK}: compiled at %s */\\n' \"$(date +%s.%N)\" >> \"$h\"\n"
        "      fi;;\n"
        "  esac\n"
        "done\n"
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def test_verify_catches_a_timestamp_in_an_installed_file(support_install: Path, source_cache: Path, tmp_path: Path) -> None:
    bin_dir = _nondeterministic_compiler(tmp_path / "bin")
    rebuild = tmp_path / "rebuild"
    proc = hermetic(
        "verify", str(support_install), "--cache", str(source_cache), "--rebuild-dir", str(rebuild),
        "--reuse-pruned", "--jobs", JOBS,
        # the interpreter's own bin dir next: Conan is then run as is, not through a launcher (pyenv's
        # shims) that would put the real compiler's directory ahead of ours
        env={"PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])},
        check=False,
    )
    out, err = proc.stdout, proc.stderr
    print(out[-3000:])
    assert proc.returncode == 8, (proc.returncode, out, err)
    assert "Traceback" not in err
    assert "error: the rebuild of" in err and "install tree" in err
    rec = json.loads(support_install.read_text())
    # both digests, and which one is which
    assert f"recorded {rec['tree']['digest']}" in out
    rebuilt = json.loads((rebuild / "work" / "llvm" / "support" / "record.json").read_text())
    assert rebuilt["tree"]["digest"] != rec["tree"]["digest"]
    assert f"rebuilt  {rebuilt['tree']['digest']}  DIFFERS" in out
    # the differing file is named, alone
    assert "differing files (1 of" in out
    assert f"differs (size, sha256): {HEADER}" in out
    # and diffoscope shows what differs in it
    assert "diffoscope: " in out and f"── {HEADER}" in out
    assert MARK in out
    report = (rebuild / "diffoscope" / "diffoscope.txt").read_text()
    assert HEADER in report and MARK in report
    assert (Path(rebuilt["install_root"]) / HEADER).read_text().count(MARK) == 1
    assert MARK not in (Path(rec["install_root"]) / HEADER).read_text()
