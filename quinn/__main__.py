"""``python -m quinn``."""

import sys

from quinn.cli import console

sys.exit(console())
