"""The options table: every row's flag, environment variable and [tool.hermetic] key reach the same setting, the help
says the variable and the default, the table refuses a name twice, and a new row works in every layer."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from helpers import hermetic
from hermetic.__main__ import build_parser
from hermetic.cli.common import add_options
from hermetic.core.errors import ExitCode, UsageError
from hermetic.model import settings
from hermetic.model.options import GROUPS, OPTIONS, Kind, Option, Origin, Table

pytestmark = pytest.mark.unit

# One value per row that differs from the default, as the environment and pyproject.toml write it (a new row
# with an environment variable or a key needs one here: the test below fails without it).
SAMPLES = {
    "cache_dir": "{tmp}/cache", "work_dir": "{tmp}/work", "quiet": "1", "variant": "support",
    "llvm_version": "22.1.8", "llvm_recipe": "tiny", "mirrors": "{tmp}/m", "offline": "require", "jobs": "3",
    "use_apt": "0", "toolchain": "host", "glibc": "2.17", "wheelhouse": "{tmp}/wh", "use_urls": "0",
    "substitutes": "registry.example.com/llvm-cache", "compile_cache": "file:///srv/ccache",
    "distribute": "10.0.0.5/8", "sign_key": "{tmp}/k.pem",
    # the machine's architecture is the default: ask for the other one
    "arch": "arm64" if settings.machine_arch() == "amd64" else "amd64",
}


def project(tmp_path: Path, table: str = "") -> Path:
    root = tmp_path / "proj"
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f"[tool.hermetic]\n{table}\n")
    return root


def sample(row: Option, tmp_path: Path) -> str:
    return SAMPLES[row.name].format(tmp=tmp_path)


def on_the_command_line(row: Option, value: str) -> dict[str, Any]:
    """What the dispatcher takes from `hermetic all FLAG VALUE` (every group's options are on `all`)."""
    argv = ["all", row.flags[-1], *([value] if row.kind in (Kind.VALUE, Kind.LIST) else [])]
    return OPTIONS.cli_values(vars(build_parser().parse_args(argv)))


@pytest.mark.parametrize("row", [r for r in OPTIONS.rows if r.env or r.key], ids=lambda r: r.name)
def test_flag_environment_and_pyproject_key_give_the_same_setting(row: Option, tmp_path: Path) -> None:
    value = sample(row, tmp_path)
    root = project(tmp_path)
    default = OPTIONS.values({"root": str(root)}, {}, tmp_path)[row.setting]
    by_flag = OPTIONS.values({"root": str(root), **on_the_command_line(row, value)}, {}, tmp_path)[row.setting]
    assert row.env and row.key, f"{row.name}: a setting without an environment variable or a key"
    by_env = OPTIONS.values({"root": str(root)}, {row.env: value}, tmp_path)[row.setting]
    root = project(tmp_path, f"{row.key} = {value!r}".replace("'", '"'))
    by_key = OPTIONS.values({"root": str(root)}, {}, tmp_path)[row.setting]
    assert by_flag == by_env == by_key != default


@pytest.mark.parametrize("row", [r for r in OPTIONS.rows if r.negation], ids=lambda r: r.name)
def test_a_no_flag_wins_over_the_environment_and_pyproject(row: Option, tmp_path: Path) -> None:
    assert row.env and row.key
    value = sample(row, tmp_path)
    root = project(tmp_path, f"{row.key} = {value!r}".replace("'", '"'))
    cli = {"root": str(root), **OPTIONS.cli_values(vars(build_parser().parse_args(["all", row.negation])))}
    unset = OPTIONS.values({"root": str(project(tmp_path / "empty"))}, {}, tmp_path)[row.setting]
    assert OPTIONS.values(cli, {row.env: value}, tmp_path)[row.setting] == unset
    # and the flag and its negation are one or the other
    with pytest.raises(SystemExit):
        build_parser().parse_args(["all", row.flags[-1], value, row.negation])


def test_the_flag_wins_over_the_environment_and_the_environment_over_pyproject(tmp_path: Path) -> None:
    root = project(tmp_path, 'variant = "triton"\njobs = 3\noffline = "off"')
    cli = {"root": str(root), **on_the_command_line(OPTIONS.row("offline"), "require")}
    got = OPTIONS.values(cli, {"HERMETIC_JOBS": "5", "HERMETIC_OFFLINE": "auto"}, tmp_path)
    assert (got["variant"], got["jobs"], got["offline"]) == ("triton", 5, "require")


def test_the_help_names_the_variable_and_the_default_of_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option: argparse wraps at hyphens too (cross-built)
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["all"].format_help().split())
    for row in OPTIONS.rows:
        assert row.flags[-1] in text
        said = " ".join(row.help_text().split())
        assert said in text, f"{row.name}: --help lacks {said!r}"
        assert row.env is None or row.env in said
        assert row.kind in (Kind.ON, Kind.OFF) or f"default: {row.default}" in said
        if row.negation:
            assert row.negation in text and f"whatever {row.env}" in text


def test_every_row_is_a_settings_field_and_every_field_a_row() -> None:
    fields = set(settings.Settings.__dataclass_fields__) - {"arch"}  # arch: the first of the arches
    assert {r.setting for r in OPTIONS.rows} == fields
    assert set(GROUPS) == {r.group for r in OPTIONS.rows}
    assert OPTIONS.keys() == sorted(r.key for r in OPTIONS.rows if r.key)


@pytest.mark.parametrize(
    ("change", "what"),
    [
        ({"flags": ("--jobs",)}, "flag --jobs"),
        ({"negation": "--no-apt", "negation_help": "x"}, "flag --no-apt"),
        ({"env": "HERMETIC_JOBS"}, "environment variable HERMETIC_JOBS"),
        ({"key": "jobs"}, "[tool.hermetic] key jobs"),
        ({"dest": "target_arch"}, "dest target_arch"),
        ({"field": "jobs"}, "setting jobs"),
    ],
)
def test_the_table_refuses_a_second_row_with_the_same_flag_variable_key_or_dest(change: dict[str, Any], what: str) -> None:
    new = Option("threads", "threads", ("--threads",), "threads", "build", lambda v, o: v, "none",
                 env="HERMETIC_THREADS", key="threads")
    OPTIONS.add(new)  # alone it is fine
    with pytest.raises(ValueError, match="names the " + re.escape(what)):
        OPTIONS.add(replace(new, **change))
    with pytest.raises(ValueError, match="unknown groups"):
        Table((replace(new, group="nowhere"),))


def test_a_new_option_is_one_row(tmp_path: Path) -> None:
    row = Option("codename", "release code name", ("--codename",), "the release's code name", "build",
                 lambda value, origin: str(value).upper() if value else None, "none",
                 env="HERMETIC_CODENAME", key="codename", metavar="NAME")
    table = OPTIONS.add(row)
    parser = argparse.ArgumentParser()
    add_options(parser, "common", "build", table=table)
    assert "(HERMETIC_CODENAME; default: none)" in " ".join(parser.format_help().split())
    root = project(tmp_path)
    cli = {"root": str(root), **table.cli_values(vars(parser.parse_args(["--codename", "flag"])))}
    assert table.values(cli, {"HERMETIC_CODENAME": "env"}, tmp_path)["codename"] == "FLAG"
    assert table.values({"root": str(root)}, {"HERMETIC_CODENAME": "env"}, tmp_path)["codename"] == "ENV"
    root = project(tmp_path, 'codename = "key"')
    assert table.values({"root": str(root)}, {}, tmp_path)["codename"] == "KEY"
    # the table without the row does not know the key
    with pytest.raises(UsageError, match=r"unknown keys in \[tool.hermetic\]: codename"):
        OPTIONS.values({"root": str(root)}, {}, tmp_path)


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"HERMETIC_JOBS": "many"}, "invalid job count 'many'"),
        ({"HERMETIC_QUIET": "perhaps"}, "invalid value for quiet: 'perhaps'"),
        ({"HERMETIC_ARCH": "sparc"}, "invalid architecture sparc"),
        ({"HERMETIC_SUBSTITUTES": "not a registry"}, "invalid substitute"),
    ],
)
def test_a_bad_value_in_the_environment_is_a_usage_error(env: dict[str, str], said: str) -> None:
    proc = hermetic("variants", env=env, check=False)
    assert proc.returncode == ExitCode.USAGE and said in proc.stderr and "Traceback" not in proc.stderr


def test_a_file_where_a_directory_belongs_is_named_with_its_flag_and_variable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"--work-dir \(HERMETIC_WORK_DIR\) .* is not a directory"):
        OPTIONS.values({"root": str(project(tmp_path))}, {"HERMETIC_WORK_DIR": str(tmp_path / "file")}, tmp_path)


def test_parsers_see_where_hermetic_runs(tmp_path: Path) -> None:
    origin = Origin(tmp_path, tmp_path / "here", {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert OPTIONS.row("cache_dir").parse(None, origin) == (tmp_path / "xdg" / "hermetic").resolve()
    assert OPTIONS.row("work_dir").parse(None, origin) == (tmp_path / "build").resolve()
    assert OPTIONS.row("llvm_recipe").parse("r/x", origin) == str((tmp_path / "here" / "r" / "x").resolve())
    assert OPTIONS.row("jobs").parse(None, origin) == (os.cpu_count() or 1)
