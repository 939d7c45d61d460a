"""``python -m trainvault.cli``."""

import sys

from trainvault.cli import main

sys.exit(main())
