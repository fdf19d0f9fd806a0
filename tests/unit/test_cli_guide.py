"""`hermetic` with no arguments and every command's examples: each example is one the parser takes."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from hermetic.__main__ import build_parser, main
from hermetic.cli.guide import EXAMPLES, START_HERE

# an example line is the command, then (after two or more spaces) what it does
_COMMENT = re.compile(r"\s{2,}\S.*$")


def _leaves(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {prefix.strip(): parser}
    found: dict[str, argparse.ArgumentParser] = {}
    for name, child in subs[0].choices.items():
        found.update(_leaves(child, f"{prefix} {name}"))
    return found


def _argv(line: str) -> list[str]:
    words = shlex.split(_COMMENT.sub("", line))
    assert words[0] == "hermetic", line
    return words[1:]


def test_every_command_has_examples_and_every_example_names_a_command() -> None:
    leaves = _leaves(build_parser())
    assert sorted(leaves) == sorted(EXAMPLES)


# the guide's first block ("start here:" up to its first empty line) holds commands as they are typed
_FIRST_STEPS = START_HERE.split("\n\n", 1)[0].splitlines()[1:]


@pytest.mark.parametrize("line", [line for lines in EXAMPLES.values() for line in lines] + _FIRST_STEPS)
def test_each_example_is_accepted_by_the_parser(line: str) -> None:
    argv = _argv(line.strip())
    args = build_parser().parse_args(argv)
    assert callable(getattr(args, "func", None)), line


def test_each_command_help_ends_with_its_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["pull", "--help"])
    out = capsys.readouterr().out
    assert out.rstrip().endswith(EXAMPLES["pull"][-1])
    assert "\nexamples:\n" in out


def test_no_arguments_prints_where_to_start(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    assert "start here:" in out and "hermetic all --variant support" in out and "which check:" in out
    # the first screen: where to start, not every option
    assert len(out.splitlines()) <= 40 and "--wheelhouse" not in out
    assert "commands: fetch, " in out


def test_top_level_help_has_the_guide(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert START_HERE in out
