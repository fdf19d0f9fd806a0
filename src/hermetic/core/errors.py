"""Every user-facing failure of hermetic.

Each error says what failed, why, and what to do; the CLI prints it without a
traceback and exits with the code of its class, so scripts can tell a bad
argument from a broken build from an unreachable registry.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence


class ExitCode:
    OK = 0
    INTERNAL = 1
    USAGE = 2
    RECIPE = 3
    SOURCE = 4
    OFFLINE = 5
    BUILD = 6
    REGISTRY = 7
    VERIFY = 8
    ENVIRONMENT = 9
    UNSIGNED = 10
    BAD_SIGNATURE = 11
    UNTRUSTED_KEY = 12


class HermeticError(Exception):
    """Base class: `what` failed, `why`, and `fix` (what the user should do)."""

    exit_code = ExitCode.INTERNAL

    def __init__(self, what: str, why: str = "", fix: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.why = why
        self.fix = fix

    def render(self) -> str:
        lines = [f"error: {self.what}"]
        if self.why:
            lines.append(f"  why: {self.why}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


class UsageError(HermeticError):
    exit_code = ExitCode.USAGE


class RecipeError(HermeticError):
    """A recipe, variant or option is unknown or malformed."""

    exit_code = ExitCode.RECIPE


class SourceError(HermeticError):
    """A source archive is missing, unreachable or does not match its digest."""

    exit_code = ExitCode.SOURCE


class OfflineError(HermeticError):
    """Offline enforcement was required but is not possible here."""

    exit_code = ExitCode.OFFLINE


class BuildError(HermeticError):
    exit_code = ExitCode.BUILD


class RegistryError(HermeticError):
    exit_code = ExitCode.REGISTRY


class VerifyError(HermeticError):
    """An artifact does not match its digest, record or layout rules."""

    exit_code = ExitCode.VERIFY


class UnsignedError(VerifyError):
    """A signature was required and there is none: the artifact was never signed, or its signature is lost."""

    exit_code = ExitCode.UNSIGNED


class SignatureError(VerifyError):
    """A signature is there but does not verify: the artifact or its signed document was changed after signing."""

    exit_code = ExitCode.BAD_SIGNATURE


class UntrustedKeyError(VerifyError):
    """Every signature verifies, but by keys the verifier was not told to trust."""

    exit_code = ExitCode.UNTRUSTED_KEY


class EnvironmentError_(HermeticError):
    """The machine lacks something: a tool, disk space, permissions."""

    exit_code = ExitCode.ENVIRONMENT


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


class SubprocessFailed(BuildError):
    """A child process failed: carries the command, exit code, output tail and a repro line."""

    def __init__(
        self,
        what: str,
        argv: Sequence[str],
        returncode: int,
        output: str,
        cwd: str | None = None,
        env_overrides: dict[str, str] | None = None,
        fix: str = "",
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.output_tail = tail(output)
        prefix = f"cd {shlex.quote(cwd)} && " if cwd else ""
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((env_overrides or {}).items()))
        self.repro = prefix + (envs + " " if envs else "") + shlex.join(self.argv)
        why = f"`{shlex.join(self.argv[:6])}{' …' if len(self.argv) > 6 else ''}` exited with {returncode}"
        super().__init__(what, why, fix or "read the output above; rerun the step by hand with the repro line")

    def render(self) -> str:
        out = [super().render(), "  output (last lines):"]
        out += [f"    | {line}" for line in self.output_tail.splitlines()]
        out.append(f"  repro: {self.repro}")
        return "\n".join(out)


def disk_full(path: str, exc: OSError) -> EnvironmentError_:
    return EnvironmentError_(
        f"no space left while writing {path}",
        str(exc),
        "free disk space or point HERMETIC_CACHE / --work-dir at a larger volume, then rerun",
    )
