"""Sphinx glue for hermetic's docs: checked citations of reports and repository paths, the report plots, the settings."""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from reportplots import chart, svg
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
logger = logging.getLogger(__name__)


def _checked_path(prefix: str) -> Any:
    """A role that prints a repository path and warns (an error under -W) when it does not exist."""

    def role(name: str, rawtext: str, text: str, lineno: int, inliner: Any,
             options: dict[str, Any] | None = None, content: list[str] | None = None) -> tuple[list[nodes.Node], list[Any]]:
        rel = f"{prefix}{text.strip()}"
        if not (ROOT / rel).exists():
            doc = inliner.document.settings.env.docname
            logger.warning("%s cites %s, which is not in the repository", doc, rel, location=(doc, lineno))
        return [nodes.literal(rawtext, rel, classes=["repo-path"])], []

    return role


class ReportPlot(SphinxDirective):
    """`report-plot NAME`: one of reportplots.CHARTS as inline SVG, with the reports it read named below it."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        try:
            made = chart(name, ROOT)
        except (KeyError, OSError, ValueError) as exc:
            raise self.error(f"report-plot {name}: {exc}") from exc
        for source in made.sources:
            self.env.note_dependency(str(ROOT / source))
        figure = nodes.container(classes=["report-plot"])
        figure += nodes.raw("", svg(made), format="html")
        note = nodes.paragraph(classes=["report-plot-sources"])
        note += nodes.Text("Drawn when the docs were built, from ")
        for i, source in enumerate(made.sources):
            if i:
                note += nodes.Text(", ")
            note += nodes.literal(source, source)
        note += nodes.Text(".")
        figure += note
        return [figure]


def trimmed(value: Any, keep: int) -> Any:
    """`value` with every list longer than `keep` cut to `keep` items and a note of how many were left out."""
    if isinstance(value, dict):
        return {k: trimmed(v, keep) for k, v in value.items()}
    if isinstance(value, list):
        head = [trimmed(v, keep) for v in value[:keep]]
        return head + ([f"… {len(value) - keep} more"] if len(value) > keep else [])
    return value


class JsonExcerpt(SphinxDirective):
    """`json-excerpt REPORT`: a report's JSON as a code block, long lists cut (`:keep:`), some keys only (`:only:`)."""

    required_arguments = 1
    option_spec: ClassVar[dict[str, Any]] = {"keep": directives.nonnegative_int, "only": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        rel = f"reports/{self.arguments[0]}"
        try:
            data = json.loads((ROOT / rel).read_text())
        except (OSError, ValueError) as exc:
            raise self.error(f"json-excerpt {rel}: {exc}") from exc
        self.env.note_dependency(str(ROOT / rel))
        if "only" in self.options:
            wanted = [k.strip() for k in self.options["only"].split(",")]
            missing = [k for k in wanted if k not in data]
            if missing:
                raise self.error(f"json-excerpt {rel}: no key {', '.join(missing)}")
            data = {k: data[k] for k in wanted}
        text = json.dumps(trimmed(data, self.options.get("keep", 3)), indent=2, ensure_ascii=False)
        block = nodes.literal_block(text, text, language="json")
        caption = nodes.paragraph(classes=["report-plot-sources"])
        caption += [nodes.Text("From "), nodes.literal(rel, rel), nodes.Text(", long lists cut.")]
        return [block, caption]


class ModuleMap(SphinxDirective):
    """`module-map DIR`: every Python module under DIR with the first line of its docstring, read without importing."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        base = ROOT / self.arguments[0]
        if not base.is_dir():
            raise self.error(f"module-map: {self.arguments[0]} is not a directory of the repository")
        rows = nodes.definition_list(classes=["module-map"])
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/tests/" in rel or path.name == "__main__.py":
                continue
            self.env.note_dependency(str(path))
            doc = ast.get_docstring(ast.parse(path.read_text(), rel)) or ""
            item = nodes.definition_list_item()
            item += nodes.term("", "", nodes.literal(rel, rel))
            item += nodes.definition("", nodes.paragraph(text=doc.strip().split("\n")[0] or "(no docstring)"))
            rows += item
        return [rows]


class CliGuide(SphinxDirective):
    """`cli-guide`: `hermetic --help`'s "start here" and every command's examples (hermetic/cli/guide.py), as typed.

    The argparse directive is given `:noepilog:`: its epilog would be read as prose, the lines joined and
    `--` turned into a dash, so a reader could not paste them."""

    def run(self) -> list[nodes.Node]:
        from hermetic.cli import guide

        self.env.note_dependency(guide.__file__)
        found: list[nodes.Node] = [nodes.literal_block(guide.START_HERE, guide.START_HERE, language="none")]
        rows = nodes.definition_list(classes=["cli-examples"])
        for command, lines in guide.EXAMPLES.items():
            item = nodes.definition_list_item()
            item += nodes.term("", "", nodes.literal(command, f"hermetic {command}"))
            text = "\n".join(lines)
            item += nodes.definition("", nodes.literal_block(text, text, language="none"))
            rows += item
        return [*found, rows]


def _cells(*cells: list[nodes.Node] | str) -> nodes.row:
    row = nodes.row()
    for cell in cells:
        para = nodes.paragraph()
        para += [nodes.Text(cell)] if isinstance(cell, str) else cell
        row += nodes.entry("", para)
    return row


def _literals(*texts: str) -> list[nodes.Node]:
    out: list[nodes.Node] = []
    for i, text in enumerate(texts):
        out += [nodes.Text(", ")] if i else []
        out.append(nodes.literal(text, text))
    return out


def _takers(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Every command (`build llvm`) with the dests of its options, read from the parser."""
    found: dict[str, set[str]] = {}
    todo = [parser]
    while todo:
        p = todo.pop()
        groups = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        for a in groups:
            todo.extend(dict.fromkeys(a.choices.values()))
        if not groups:  # a command, not `hermetic` nor a group of commands (`build`)
            found[p.prog.removeprefix(parser.prog + " ")] = {a.dest for a in p._actions if a.option_strings}
    return found


class OptionsTable(SphinxDirective):
    """`options-table`: the settings as hermetic.model.options has them, a table per option group, with the commands
    that take each group read from the parser."""

    def run(self) -> list[nodes.Node]:
        from hermetic.__main__ import build_parser
        from hermetic.model.options import GROUPS, OPTIONS

        self.env.note_dependency(str(ROOT / "src" / "hermetic" / "model" / "options.py"))
        takers = _takers(build_parser())
        out: list[nodes.Node] = []
        for group, title in GROUPS.items():
            rows = OPTIONS.group(group)
            every = sorted(c for c, dests in takers.items() if all(r.destination in dests for r in rows))
            note = nodes.paragraph()
            note += [nodes.strong(text=title[:1].upper() + title[1:]), nodes.Text(", taken by ")]
            note += _literals(*every) if len(every) < len(takers) else [nodes.Text("every command")]
            table = nodes.table(classes=["options-table"])
            tgroup = nodes.tgroup(cols=5)
            table += tgroup
            tgroup += [nodes.colspec(colwidth=w) for w in (3, 4, 4, 3, 4)]
            tgroup += nodes.thead("", _cells("setting", "option", "environment", "[tool.hermetic]", "default"))
            body = nodes.tbody()
            for r in rows:
                flags = _literals(*r.flags, *((r.negation,) if r.negation else ()))
                more = sorted(c for c, dests in takers.items() if r.destination in dests and c not in every)
                flags += [nodes.Text(" (also "), *_literals(*more), nodes.Text(")")] if more else []
                env = _literals(r.env) if r.env else [nodes.Text("none")]
                env += [nodes.Text(" as "), nodes.literal(r.env_form, r.env_form)] if r.env_form else []
                body += _cells(r.title, flags, env, _literals(r.key) if r.key else "none", r.default)
            tgroup += body
            out += [note, table]
        return out


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_role("report", _checked_path("reports/"))
    app.add_role("repo", _checked_path(""))
    app.add_directive("report-plot", ReportPlot)
    app.add_directive("json-excerpt", JsonExcerpt)
    app.add_directive("module-map", ModuleMap)
    app.add_directive("cli-guide", CliGuide)
    app.add_directive("options-table", OptionsTable)
    # The argparse directive renders each subcommand's epilog as prose (`:noepilog:` reaches only the top
    # parser): the reference shows the examples once, as literal blocks, through cli-guide instead.
    from hermetic.cli import guide

    guide.epilog = lambda command: None
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
