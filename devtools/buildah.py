"""buildah and friends as the tests run them: a store of the test's own (vfs, chroot isolation, as root)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path


def run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@contextlib.contextmanager
def buildah_store(base: Path) -> Iterator[list[str]]:
    """buildah's options for a store of the test's own under base (vfs, as root); emptied afterwards."""
    if shutil.which("buildah") is None:
        raise AssertionError("buildah is missing: install Debian's buildah package (.ci/setup does)")
    store = ["--root", str(base / "storage"), "--runroot", str(base / "run"), "--storage-driver", "vfs"]
    try:
        yield store
    finally:
        subprocess.run(["buildah", *store, "rm", "--all"], capture_output=True, timeout=120)
        subprocess.run(["buildah", *store, "rmi", "--all", "--force"], capture_output=True, timeout=120)


def buildah_mount(store: list[str], image: str) -> Path:
    """The root filesystem of a working container of image, mounted."""
    ctr = run("buildah", *store, "from", image).strip()
    return Path(run("buildah", *store, "mount", ctr).strip())


def buildah_copy_from(store: list[str], ref: str, prefix: str, ctx: Path, tag: str, *bud: str) -> Path:
    """`buildah bud` (with the extra options bud) of a FROM scratch image that takes prefix from the registry
    image ref, in the same COPY --from=${LLVM_IMAGE} form as containers/wheel.Containerfile; the result, mounted."""
    ctx.mkdir(parents=True)
    (ctx / "Containerfile").write_text(
        f"ARG LLVM_IMAGE\nFROM scratch\nARG LLVM_IMAGE\nCOPY --from=${{LLVM_IMAGE}} {prefix} {prefix}\n"
    )
    run(
        "buildah", *store, "bud", "--isolation", "chroot", "--tls-verify=false", *bud,
        "--build-arg", f"LLVM_IMAGE={ref}", "-t", tag, "-f", str(ctx / "Containerfile"), str(ctx),
    )  # fmt: skip
    return buildah_mount(store, tag)
