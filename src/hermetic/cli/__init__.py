"""The command line: the only face of hermetic and the only code that prints.

One module per command group, each with `register(subparsers, common)` and its `cmd_*` handlers; the
dispatcher that parses arguments into Settings once and runs the chosen command is hermetic/__main__.py.
Command modules do not import each other: what several share is in cli/common.py.
"""
