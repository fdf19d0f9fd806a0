"""Sphinx configuration of hermetic's documentation site (Furo, MyST; the command reference from the parser)."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# This checkout's hermetic and tilec, not an installed copy: the reference is the parser of these sources.
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "src" / "compiler"), str(DOCS / "_ext")]

project = "hermetic"
author = "the hermetic authors"
copyright = "the hermetic authors"
extensions = ["myst_parser", "sphinxarg.ext", "hermetic_docs"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# Shell lines are shown as they are; blocks that are code say their language.
highlight_language = "none"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "hermetic"
html_static_path = ["_static"]
html_css_files = ["hermetic.css"]
html_last_updated_fmt = None
