"""``python -m localsession``: the command line."""

import sys

from localsession.cli import main

sys.exit(main())
