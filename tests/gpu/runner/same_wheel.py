"""Compare two builds of the same wheel (runner.sh --again): write wheel-again.json, exit 1 unless identical.

    python3 same_wheel.py FIRST.whl SECOND.whl OUT.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def main() -> int:
    first, second, out = (Path(a) for a in sys.argv[1:4])
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (first, second)]
    same = digests[0] == digests[1]
    report = {
        "first": {"file": first.name, "sha256": digests[0], "how": "runner.sh wheel step: umask 022, its work dir"},
        "second": {
            "file": second.name,
            "sha256": digests[1],
            "how": "umask 077, another cwd and --work-dir (runner.sh --again)",
        },
        "identical": same,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wheel again: {'identical' if same else 'DIFFERS'} {digests[0]} {digests[1]}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
