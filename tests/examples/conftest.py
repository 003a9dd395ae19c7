"""The real model's fixtures (converted once per run), for the real-model smoke runs.

``tests/`` is on ``sys.path`` here (pytest's prepend import mode: ``tests/examples`` is a
package, ``tests`` is not), so the sibling package ``realmodel`` imports by that name.
"""

from realmodel.fixtures import shipped_gguf, smol_cache, smol_dir

__all__ = ["shipped_gguf", "smol_cache", "smol_dir"]
