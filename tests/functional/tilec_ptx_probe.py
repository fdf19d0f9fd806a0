"""Lower tests/native/kernels.py's kernels to PTX with the tilec on sys.path and print them as JSON.

Run by the arm64 wheel's test and report under each wheel's own interpreter: natively for amd64, under
qemu-user for arm64 (`qemu-aarch64-static -L ROOT ROOT/usr/bin/python3.11 tilec_ptx_probe.py CACHE_DIR`).
No ptxas and no libdevice: only LLVM's NVPTX backend, the part compiled into the wheel, decides the bytes.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))

import kernels  # tests/native/kernels.py, found through the path above
import tilec

TARGETS = ("sm_80", "sm_90")


def main() -> int:
    settings = tilec.Settings.from_env({"TILEC_CACHE_DIR": sys.argv[1], "PATH": ""})
    out: dict[str, object] = {"machine": platform.machine(), "tilec": tilec.__file__, "llvm": tilec.llvm_version(),
                              "ptx": {}}
    ptx: dict[str, str] = {}
    for name in ("vector_add", "block_sum"):
        for target in TARGETS:
            k = tilec.compile(getattr(kernels, name)(tilec.ir), target=target, use_ptxas=False, settings=settings)
            ptx[f"{name}.{target}"] = k.asm["ptx"]
    out["ptx"] = ptx
    out["sha256"] = {key: hashlib.sha256(text.encode()).hexdigest() for key, text in ptx.items()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
