"""Moved to :mod:`localsession.numerics.datums` (shared with the fakes); this name stays so
existing imports keep working, and it is the same module object."""

import sys

from localsession.numerics import datums as _moved
from localsession.numerics.datums import *  # noqa: F403 - the public names, for type checkers

sys.modules[__name__] = _moved
