"""Progress messages: the one place that decides where they go.

Domain modules take a `Log` callable and never print; the CLI makes one with
`stderr_log`, tests pass a list's append.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

Log = Callable[[str], None]


def stderr_log(quiet: bool = False) -> Log:
    def log(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    return log


def null_log(msg: str) -> None:
    """A Log that drops everything (for callers that want no progress)."""
