"""The command line: the only face of hermetic and the only code that prints.

One module per command group; `main` parses arguments into Settings once and
runs the chosen command, turning every failure into a classed exit code.
"""

from hermetic.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
