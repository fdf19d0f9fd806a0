"""The test_package's account of its run: a build whose program did not run (or not under the emulator
hermetic gave it) is not a good build."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from hermetic.core.errors import BuildError

TEST_RUN = "run.json"  # what the test_package's test() writes into HERMETIC_TEST_OUTPUT


@dataclass(frozen=True)
class TestRun:
    """How the test_package's program ran: what it printed, and the emulator of a cross build (else None)."""

    __test__ = False  # not a pytest class

    output: str
    emulator: str | None


def test_run(test_out: Path, emulator: tuple[str, ...] | None, log_path: Path) -> TestRun:
    """Read the test_package's account of its run; a build whose program did not run is not a good build.

    Conan skips a test_package's test() where it thinks the build's programs cannot run (a cross
    build without an emulator), so its silence would otherwise pass. The recipe's test() checks the
    program's output itself; this checks that it ran, and under the emulator hermetic gave it.
    """
    path = test_out / TEST_RUN
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(
            "the test_package did not run its program",
            f"{path} is missing or unreadable ({exc}); Conan skips test() where it cannot run the build's programs",
            f"see {log_path}",
        ) from exc
    ran_with = [str(a) for a in data.get("emulator") or []]
    if ran_with != list(emulator or ()):
        raise BuildError(
            "the test_package's program did not run the way this build asked",
            f"expected {shlex.join(emulator) if emulator else 'a native run'}, "
            f"it ran with {shlex.join(ran_with) if ran_with else 'no emulator'}",
            f"see {log_path}",
        )
    # The record names the emulator by its file name: the machine's path of it is no input of the tree.
    shown = shlex.join([Path(ran_with[0]).name, *ran_with[1:]]) if ran_with else None
    return TestRun(str(data.get("output", "")).strip(), shown)
