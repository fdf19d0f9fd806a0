"""The documentation site: built with warnings as errors, its references complete, its pages looked at in Chromium.

The site is built once per module with this checkout's Sphinx, Furo, MyST and sphinx-argparse (the
`test` extra pins them); headless Chromium (Debian's `chromium`) takes the screenshots, and Pillow
reads them back.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SIZE = (1280, 900)
# Every page the site must have (the list): a page that is missing or renamed fails here.
PAGES = (
    "index", "getting-started", "concepts", "performance", "design",
    "guides/consume-image", "guides/publish", "guides/sharing", "guides/arm64", "guides/audit",
    "guides/third-party-sdist", "guides/offline", "guides/gpu-runner",
    "reference/cli", "reference/settings", "reference/exit-codes", "reference/record", "reference/image",
    "reference/sbom", "reference/provenance",
    "tilec/index", "tilec/kernels", "tilec/cache", "tilec/aot", "tilec/plugins", "tilec/cli",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(out)],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, f"sphinx-build -W failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return out


def text_of(page: Path) -> str:
    """The visible text of the page's article, tags dropped and entities decoded."""
    raw = page.read_text()
    body = raw[raw.index("<article"): raw.index("</article>")]
    return html.unescape(re.sub(r"<[^>]+>", "", body))


# Run in a child process: importing tilec from its source here would leave a tilec without its native
# modules in sys.modules for later tests of the same session.
COMMANDS = """
import argparse, importlib, json, sys
def walk(p):
    yield p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in dict.fromkeys(a.choices.values()):
                yield from walk(sub)
parser = importlib.import_module(sys.argv[1]).build_parser()
print(json.dumps({"description": parser.description, "commands": [
    [p.prog, [o for a in p._actions if not isinstance(a, argparse._HelpAction) for o in a.option_strings]]
    for p in walk(parser)]}))
"""


def commands(module: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """The parser's description, and every command's prog with its option strings (help left out)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "src" / "compiler")])}
    proc = subprocess.run([sys.executable, "-c", COMMANDS, module], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    return data["description"], [(prog, options) for prog, options in data["commands"]]


def test_the_site_builds_with_warnings_as_errors(site: Path) -> None:
    missing = [p for p in PAGES if not (site / f"{p}.html").is_file()]
    assert not missing, f"pages missing from the site: {missing}"


@pytest.mark.parametrize(("module", "page"), [("hermetic.__main__", "reference/cli.html"), ("tilec.cli", "tilec/cli.html")])
def test_every_command_and_option_is_in_the_reference(site: Path, module: str, page: str) -> None:
    description, found = commands(module)
    text = text_of(site / page)
    # what sphinx-argparse generated: from the parser's description on (the page's own prose comes first)
    text = text[text.index(description):]
    absent = [prog for prog, _ in found if prog not in text]
    # -h/--help is every command's; sphinx-argparse leaves it out, and so does the list
    absent += [f"{prog} {o}" for prog, options in found for o in options if o not in text]
    assert not absent, f"{page} lacks: {absent}"
    assert len(found) >= 5


def test_the_settings_page_is_the_options_table(site: Path) -> None:
    from hermetic.model.options import OPTIONS

    text = text_of(site / "reference" / "settings.html").replace("\u2019", "'")  # Sphinx's smart quotes
    missing = [f"{r.name}: {x}" for r in OPTIONS.rows
               for x in (r.title, *r.flags, r.negation, r.env, r.env_form, r.key, r.default) if x and x not in text]
    assert not missing, f"the settings page lacks: {missing}"
    # each group says which commands take it, from the parser: `all` takes every group
    assert text.count("taken by") == len({r.group for r in OPTIONS.rows})


def test_the_plots_are_drawn_from_the_reports(site: Path) -> None:
    page = (site / "performance.html").read_text()
    plots = re.findall(r'<svg [^>]*class="report-plot".*?</svg>', page, flags=re.S)
    sources = (ROOT / "docs" / "performance.md").read_text().count("{report-plot}")
    assert len(plots) == sources >= 6
    assert all(p.count("<rect ") >= 3 for p in plots), "a plot without its bars"
    # each names the reports it was drawn from, under it
    assert page.count("Drawn when the docs were built, from") == len(plots)


def chromium() -> list[str]:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is missing: install Debian's chromium package (.ci/setup does)")
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium's sandbox refuses root
    return [exe, "--headless=new", *sandbox, "--disable-gpu", "--hide-scrollbars", "--no-first-run"]


def screenshot(url: str, dest: Path, profile: Path) -> Image.Image:
    proc = subprocess.run(
        [*chromium(), f"--user-data-dir={profile}", f"--window-size={SIZE[0]},{SIZE[1]}", f"--screenshot={dest}", url],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0 and dest.is_file(), f"chromium failed ({proc.returncode}):\n{proc.stderr[-2000:]}"
    return Image.open(dest).convert("RGB")


def ink(img: Image.Image) -> float:
    """The share of pixels that are not the page's background (its most common colour)."""
    counts = img.getcolors(maxcolors=img.width * img.height) or []
    background = max(counts)[0]
    return 1 - background / (img.width * img.height)


def differing(a: Image.Image, b: Image.Image) -> float:
    pairs = zip(a.get_flattened_data(), b.get_flattened_data(), strict=True)
    return sum(1 for p, q in pairs if p != q) / (a.width * a.height)


def test_the_home_page_and_a_guide_as_a_reader_sees_them(site: Path, tmp_path: Path) -> None:
    profile = tmp_path / "profile"
    home = screenshot((site / "index.html").as_uri(), tmp_path / "home.png", profile)
    guide = screenshot((site / "guides" / "consume-image.html").as_uri(), tmp_path / "guide.png", profile)
    empty = tmp_path / "empty.html"
    empty.write_text("<!doctype html><title>empty</title>")
    blank = screenshot(empty.as_uri(), tmp_path / "blank.png", profile)

    assert home.size == guide.size == SIZE
    # the measure tells an empty page from a page: the empty one has no ink at all
    assert ink(blank) < 0.001
    assert ink(home) > 0.05, f"the home page looks blank ({ink(home):.3f} ink)"
    assert ink(guide) > 0.05, f"the guide looks blank ({ink(guide):.3f} ink)"
    assert differing(home, guide) > 0.05, "the home page and the guide render alike"
