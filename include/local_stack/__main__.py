"""``python include/local_stack run|up ...`` (or ``python -m local_stack``): see ``cli``."""

import sys
from pathlib import Path

if not __package__:
    # Run as a folder: Python put this folder on sys.path, not include/ above it, from
    # where the package imports its own modules by name.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from local_stack.cli import main

sys.exit(main())
