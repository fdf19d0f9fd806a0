"""Summarize a `python -m unittest -v` style log (llvmlite's own suite) as JSON.

    python3 -m devtools.unittest_summary LOG OUT.json

Counts from the final "Ran N tests" and "OK (skipped=K)" / "FAILED (failures=F, errors=E, ...)"
lines; every skipped test with the reason the suite gave, every failed or erroring test by name.
Exit 0 when the suite passed, 1 when it failed or the log holds no result.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

RESULT = re.compile(r"^(?P<name>\w+) \((?P<where>[\w.]+)\)(?:\n.*?)? \.\.\. (?P<status>ok|skipped|FAIL|ERROR|expected failure|unexpected success)(?: '(?P<reason>.*)')?$", re.M)


def _named(case: dict[str, str]) -> str:
    """Python 3.11 on prints `name (module.Class.name)`, older ones `name (module.Class)`."""
    where = case["where"]
    return where if where.endswith("." + case["name"]) else f"{where}.{case['name']}"


def summarize(text: str) -> dict[str, object]:
    ran = re.search(r"^Ran (\d+) tests? in ([\d.]+)s$", text, re.M)
    tail = re.search(r"^(OK|FAILED)(?: \((.*)\))?$", text, re.M)
    counts: dict[str, int] = {}
    if tail and tail.group(2):
        for part in tail.group(2).split(","):
            key, _, value = part.strip().partition("=")
            counts[key] = int(value)
    cases = [m.groupdict() for m in RESULT.finditer(text)]
    return {
        "ran": int(ran.group(1)) if ran else None,
        "seconds": float(ran.group(2)) if ran else None,
        "result": tail.group(1) if tail else None,
        "failures": counts.get("failures", 0),
        "errors": counts.get("errors", 0),
        "skipped": counts.get("skipped", 0),
        "expected_failures": counts.get("expected failures", 0),
        "skipped_tests": [f"{_named(c)}: {c['reason']}" for c in cases if c["status"] == "skipped"],
        "failed_tests": [_named(c) for c in cases if c["status"] in ("FAIL", "ERROR")],
    }


def main() -> int:
    log, out = Path(sys.argv[1]), Path(sys.argv[2])
    summary = summarize(log.read_text(errors="replace"))
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "skipped_tests"}, indent=2))
    return 0 if summary["result"] == "OK" and summary["ran"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
