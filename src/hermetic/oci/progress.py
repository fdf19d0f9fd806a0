"""Progress of large blob transfers on stderr; a line per 10 % when stderr is not a terminal."""

from __future__ import annotations

import sys
import time
from typing import IO


class Progress:
    """Progress of large blobs on stderr; a line per 10 % when stderr is not a terminal."""

    threshold = 8 << 20

    def __init__(self, enabled: bool = True, stream: IO[str] | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._label = ""
        self._total = 0
        self._step = -1
        self._start = 0.0

    def start(self, label: str, total: int) -> None:
        self._label, self._total, self._step, self._start = label, total, -1, time.monotonic()
        self.update(0)

    def update(self, done: int) -> None:
        if not self.enabled or self._total < self.threshold:
            return
        step = int(10 * done / self._total) if self._total else 10
        tty = self.stream.isatty()
        if step == self._step and not tty:
            return
        self._step = step
        line = f"{self._label} {done / 1e6:8.1f}/{self._total / 1e6:.1f} MB"
        self.stream.write(("\r" + line) if tty else line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if not self.enabled or self._total < self.threshold:
            return
        secs = max(time.monotonic() - self._start, 1e-9)
        end = "\n" if self.stream.isatty() else ""
        self.stream.write(f"{end}{self._label} done, {self._total / 1e6 / secs:.1f} MB/s\n")
        self.stream.flush()
