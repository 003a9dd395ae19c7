"""An engine setting with a few accepted spellings, read from the environment.

``LOCALSESSION_FUSED_HEAD``, ``LOCALSESSION_CUDNN_ATTENTION`` and
``LOCALSESSION_LORA_PRECISION`` each map a handful of values (case and surrounding blanks
ignored; unset reads as ``""``) to on or off, and refuse anything else with an error that
names the variable, the value and the choices.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from localsession.port import EngineConfigError


def read_switch(
    name: str,
    choices: Mapping[str, bool],
    expected: str,
    error: type[Exception] = EngineConfigError,
) -> bool:
    """``choices[value of name]``; a value not in ``choices`` raises ``error`` saying
    "``name``='value': expected ``expected``"."""
    raw = os.environ.get(name, "").strip().lower()
    if raw not in choices:
        raise error(f"{name}={raw!r}: expected {expected}")
    return choices[raw]
