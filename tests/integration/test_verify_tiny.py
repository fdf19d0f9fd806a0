"""`hermetic verify` on the tiny recipe: a clean rebuild of a pulled image matches, an injected timestamp is caught.

The match: the image is pushed with its attestations, pulled into a fresh layout and verified from that
layout alone (the provenance says what to rebuild), in another directory, cwd and umask, later, with foreign
tools first on PATH. The same on a real LLVM build is tests/functional/test_verify_llvm.py.

The mismatch: the host toolchain's compiler is the machine's (`--toolchain host`), and a `c++` earlier on
PATH runs the real one and then appends the wall clock to the build's generated tiny-config.h, which is
installed: a non-reproducible tool of the kind verify exists to catch. Nothing in hermetic knows about it;
verify must name the file and show the line through diffoscope.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

from helpers import hermetic
from hermetic.oci.layout import Layout, pick_root

JOBS = str(os.cpu_count() or 2)
HEADER = "usr/lib64/tiny-support-1.0.0/include/tiny/Config/tiny-config.h"
MARK = "hermetic-test-nondeterminism"


def _foreign_tools(d: Path) -> dict[str, str]:
    """A PATH whose first cmake and ninja are not the pinned ones (they would fail the build)."""
    bin_dir = d / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("cmake", "ninja"):
        (bin_dir / tool).write_text("#!/bin/sh\necho 'cmake version 3.25.1'; exit 97\n")
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_verify_rebuilds_the_pulled_image_from_its_provenance(
    tiny_install: Path, tiny: tuple[str, ...], registry: Any, source_cache: Path, tmp_path: Path
) -> None:
    layout = tmp_path / "image"
    hermetic("image", "llvm", "--record", str(tiny_install), "--output", str(layout))
    digest = pick_root(Layout(layout)).digest
    ref = f"{registry.host}/verify/tiny-support-1.0.0:1.0.0"
    hermetic("push", str(layout), ref, "--insecure")
    pulled = tmp_path / "pulled"
    hermetic("pull", ref, "--layout", str(pulled), "--insecure", "--with-attestations")
    rebuild = tmp_path / "elsewhere" / "rebuild"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    # A work dir that holds no record: what to rebuild can only come from the pulled provenance.
    proc = hermetic(
        "verify", str(pulled), *tiny, "--work-dir", str(tmp_path / "empty-work"), "--cache", str(source_cache),
        "--rebuild-dir", str(rebuild), "--keep", "--json", "--jobs", JOBS, "--offline", "require",
        cwd=cwd, env=_foreign_tools(tmp_path / "foreign"),
    )
    report = json.loads(proc.stdout)
    assert report["match"] is True and report["kind"] == "image"
    assert "built from provenance sha256:" in report["artifact"]
    got = {c["what"]: c for c in report["comparisons"]}
    assert set(got) == {"pruned source", "install tree", "image manifest"}
    rec = json.loads(tiny_install.read_text())
    assert got["pruned source"]["recorded"] == got["pruned source"]["rebuilt"] == "sha256:" + rec["pruned"]["sha256"]
    assert got["install tree"]["recorded"] == got["install tree"]["rebuilt"] == rec["tree"]["digest"]
    assert got["image manifest"]["recorded"] == got["image manifest"]["rebuilt"] == digest
    cond = report["conditions"]
    assert cond["umask"] != cond["original_umask"] and cond["source_date_epoch"] == rec["source_date_epoch"]
    assert cond["rebuild_started"] >= cond["original_finished"]
    rebuilt = json.loads((rebuild / "work" / "tiny" / "support" / "record.json").read_text())
    assert rebuilt["install_root"] != rec["install_root"] and rebuilt["install_root"].startswith(str(rebuild))
    assert rebuilt["offline"]["enforced"] is True
    assert rebuilt["toolchain"]["cmake"] == rec["toolchain"]["cmake"] == "cmake version 4.4.4"


def _nondeterministic_compiler(bin_dir: Path) -> Path:
    real = shutil.which("c++")
    assert real, "c++ is not installed"
    bin_dir.mkdir(parents=True)
    # outside the build: the first compile that sees the header (-I DIR or -isystem DIR) marks it, once
    lock = bin_dir / "marked"
    wrapper = bin_dir / "c++"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'{real!s} "$@" || exit $?\n'
        "prev=\n"
        "for a do\n"
        "  case $prev in -isystem) d=$a ;; *) case $a in -I*) d=${a#-I} ;; *) d= ;; esac ;; esac\n"
        "  prev=$a\n"
        '  h="$d/tiny/Config/tiny-config.h"\n'
        f'  if [ -n "$d" ] && [ -f "$h" ] && mkdir "{lock}" 2>/dev/null; then\n'
        f"    printf '/* {MARK}: compiled at %s */\\n' \"$(date +%s.%N)\" >> \"$h\"\n"
        "  fi\n"
        "done\n"
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def test_verify_catches_a_timestamp_in_an_installed_file(
    tiny_install: Path, tiny: tuple[str, ...], source_cache: Path, tmp_path: Path
) -> None:
    bin_dir = _nondeterministic_compiler(tmp_path / "bin")
    rebuild = tmp_path / "rebuild"
    proc = hermetic(
        "verify", str(tiny_install), *tiny, "--cache", str(source_cache), "--rebuild-dir", str(rebuild),
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
    rec = json.loads(tiny_install.read_text())
    # both digests, and which one is which
    assert f"recorded {rec['tree']['digest']}" in out
    rebuilt = json.loads((rebuild / "work" / "tiny" / "support" / "record.json").read_text())
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
