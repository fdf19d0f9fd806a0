"""What the build benches do last: print the report, write it where --json says, and remove or keep
their scratch directory (--keep)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any


def emit(report: dict[str, Any], json_path: Path | None, base: Path, keep: bool) -> None:
    text = json.dumps(report, indent=2) + "\n"
    print(text)
    if json_path:
        json_path.write_text(text)
    if keep:
        print(f"kept {base}", file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)
