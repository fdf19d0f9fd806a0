"""Times as hermetic writes them: UTC, to the second, ISO 8601 (`2025-01-14T00:00:00Z`), one format everywhere."""

from __future__ import annotations

import datetime as _dt

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def iso(ts: float) -> str:
    """`ts` (seconds since the epoch) as UTC ISO 8601; fractions of a second are dropped, never rounded up."""
    return _dt.datetime.fromtimestamp(int(ts), _dt.UTC).strftime(FORMAT)


def parse_iso(text: str) -> float:
    return _dt.datetime.strptime(text, FORMAT).replace(tzinfo=_dt.UTC).timestamp()
