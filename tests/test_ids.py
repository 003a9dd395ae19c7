"""``uuid4_text``: op ids and client tokens have uuid4's text, version and variant, repeat
nowhere in a large draw, and ignore a user's ``random.seed``."""

from __future__ import annotations

import random
import re
import uuid

from localsession.ids import uuid4_text

UUID4_TEXT = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z")


def test_the_text_parses_as_a_version_4_rfc_4122_uuid() -> None:
    for _ in range(1000):
        text = uuid4_text()
        parsed = uuid.UUID(text)
        assert UUID4_TEXT.match(text) and str(parsed) == text
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_no_repeats_and_every_free_bit_varies() -> None:
    ids = [uuid.UUID(uuid4_text()).int for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    always_set, ever_set = ~0, 0
    for n in ids:
        always_set &= n
        ever_set |= n
    varied = ever_set & ~always_set  # bits seen both set and clear
    assert bin(varied).count("1") == 122  # all 128 but the version's 4 and the variant's 2


def test_a_users_seed_does_not_repeat_ids() -> None:
    random.seed(0)
    first = uuid4_text()
    random.seed(0)
    assert uuid4_text() != first
