"""The Tinker-surface conformance tests, run by ``--backend=tinker`` (backends/tinker.py)."""
