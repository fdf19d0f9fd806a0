"""The report of a rebuild-and-compare (`hermetic verify`): what was compared, what differs, and how it is shown."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermetic.core.errors import VerifyError

SHOWN_FILES = 10
DIFF_LINES = 12


class Mismatch(VerifyError):
    """The rebuild differs; carries the report so the CLI can print it before the error."""

    def __init__(self, report: Report, what: str, why: str, fix: str) -> None:
        super().__init__(what, why, fix)
        self.report = report


@dataclass(frozen=True)
class Comparison:
    what: str
    recorded: str
    rebuilt: str
    note: str = ""

    @property
    def matches(self) -> bool:
        return bool(self.recorded) and self.recorded == self.rebuilt

    def as_json(self) -> dict[str, Any]:
        out = {"what": self.what, "recorded": self.recorded, "rebuilt": self.rebuilt, "match": self.matches}
        return out | ({"note": self.note} if self.note else {})


@dataclass
class Report:
    artifact: str
    kind: str  # "llvm", "image", "wheel"
    rebuild_dir: Path
    conditions: dict[str, Any] = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    entries: int = 0
    diffoscope: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    kept: bool = True
    # What besides this machine's compiler made the recorded artifact's objects (a compile cache, compile hosts):
    # on a mismatch, the likely cause and what to do about it, in place of "not reproducible".
    suspect: tuple[str, str] | None = None

    @property
    def matches(self) -> bool:
        return bool(self.comparisons) and all(c.matches for c in self.comparisons)

    def as_json(self) -> dict[str, Any]:
        return {
            "artifact": self.artifact,
            "kind": self.kind,
            "match": self.matches,
            "comparisons": [c.as_json() for c in self.comparisons],
            "differences": self.differences,
            "entries": self.entries,
            "diffoscope": self.diffoscope,
            "conditions": self.conditions,
            "rebuild_dir": str(self.rebuild_dir) if self.kept else None,
            "seconds": round(self.seconds, 1),
        }

    def render(self) -> str:
        c = self.conditions
        lines = [f"verify: {self.kind} {self.artifact}"]
        lines.append(
            f"  rebuilt in {c.get('rebuild_dir')} (the original: {c.get('original_dir') or 'not on this machine'})"
        )
        lines.append(
            f"  umask {c.get('umask')} (was {c.get('original_umask')}), rebuild started {c.get('rebuild_started')} "
            f"(original finished {c.get('original_finished') or 'unknown'}), SOURCE_DATE_EPOCH {c.get('source_date_epoch')}"
        )
        if c.get("toolchain"):
            lines.append(f"  toolchain {c['toolchain']} (the recorded one)")
        width = max((len(x.what) for x in self.comparisons), default=0)
        for x in self.comparisons:
            state = "match" if x.matches else "DIFFERS"
            note = f"  ({x.note})" if x.note else ""
            lines.append(f"  {x.what:<{width}}  recorded {x.recorded or '-'}")
            lines.append(f"  {'':<{width}}  rebuilt  {x.rebuilt or '-'}  {state}{note}")
        if self.differences:
            lines.append(f"  differing files ({len(self.differences)} of {self.entries} entries):")
            lines += [f"    {d}" for d in self.differences[:SHOWN_FILES]]
            if len(self.differences) > SHOWN_FILES:
                lines.append(f"    … {len(self.differences) - SHOWN_FILES} more")
        d = self.diffoscope
        if d:
            if d.get("ran"):
                lines.append(f"  diffoscope: {d.get('summary')} (full report: {d.get('report')})")
                for item in d.get("files", [])[:SHOWN_FILES]:
                    lines.append(f"    ── {item['path']}")
                    lines += [f"       {t}" for t in item.get("diff", "").splitlines()[:DIFF_LINES]]
            else:
                lines.append(f"  diffoscope: not run: {d.get('why')}")
        if self.matches:
            lines.append(f"verify: OK, the rebuild is bit-for-bit identical ({self.seconds:.0f}s)")
        else:
            lines.append(f"verify: MISMATCH ({self.seconds:.0f}s); the rebuild is kept in {self.rebuild_dir}")
        return "\n".join(lines)
