"""Every build and wheel record committed in the checkout (tests and reports), read and written back by this
checkout's hermetic.model.record: prints each path with `same` or `DIFFERS`. Run from the checkout:
PYTHONPATH=src python3 reports/house-moves-2026-11-27/records_round_trip.py"""

import json
import sys
import tempfile
from pathlib import Path

from hermetic.model import record

loaders = {record.RECORD_SCHEMA: record.load_build_record, record.WHEEL_RECORD_SCHEMA: record.load_wheel_record}
bad = 0
for path in sorted(Path(".").glob("**/*.json")):
    if ".git" in path.parts or "build" in path.parts[:1]:
        continue
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError):
        continue
    if not isinstance(data, dict) or data.get("schema") not in loaders:
        continue
    with tempfile.TemporaryDirectory() as tmp:
        again = Path(tmp) / path.name
        record.write_record(again, loaders[data["schema"]](path))
        same = again.read_bytes() == path.read_bytes()
    bad += not same
    print("same   " if same else "DIFFERS", path)
sys.exit(1 if bad else 0)
