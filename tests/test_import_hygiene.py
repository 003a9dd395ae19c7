"""`import localsession` must not import torch (or transformers): fakes and clients stay fast."""

from __future__ import annotations

import subprocess
import sys


def test_import_does_not_load_torch() -> None:
    code = (
        "import sys, localsession\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    assert out.stdout.strip() == ""
