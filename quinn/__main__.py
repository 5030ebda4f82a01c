"""``python -m quinn``."""

import sys

from quinn.cli import main

sys.exit(main())
