"""`python -m tilec` is the `tilec` command."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
