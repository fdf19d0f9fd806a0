import sys

from hermetic.cli import main

sys.exit(main())
