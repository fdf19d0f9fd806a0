"""`python3 -m devtools.runner` from the checkout's root (tests/gpu/runner/device.sh starts it so on a device)."""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's hermetic (its record types), whatever else is installed: the runner and hermetic are one commit
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from devtools.runner.main import main

sys.exit(main())
