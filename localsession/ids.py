"""Random version-4 UUID text for op ids and client tokens, without a system call per id.

``str(uuid.uuid4())`` reads 16 bytes from the OS and builds a ``UUID`` object (~10 µs; a
training op takes two). These ids must be unique, not unpredictable, so they come from a
generator of our own, seeded from the OS at import and again in a forked child, and untouched
by a user's ``random.seed``. The text has ``uuid4``'s format, version and variant bits.
"""

from __future__ import annotations

import os
import random

_rng = random.Random()  # seeded from os.urandom
os.register_at_fork(after_in_child=_rng.seed)

#: The version nibble (bits 76-79) and the RFC 4122 variant (bits 62-63) of a 128-bit UUID.
_FIXED_BITS = (0xF << 76) | (0x3 << 62)
_VERSION_4_BITS = (0x4 << 76) | (0x2 << 62)


def uuid4_text() -> str:
    """A random UUID's text, ``xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx``."""
    number = (_rng.getrandbits(128) & ~_FIXED_BITS) | _VERSION_4_BITS
    h = f"{number:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
