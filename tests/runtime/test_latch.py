"""The op's ``Latch``: closed until set; every waiter, then and later, passes once it opens."""

from __future__ import annotations

import threading
import time

from localsession.runtime.sessions.operations import Latch


def test_a_closed_latch_times_out_and_an_open_one_passes_at_once() -> None:
    latch = Latch()
    started = time.monotonic()
    assert latch.wait(0.05) is False
    assert time.monotonic() - started >= 0.04
    assert latch.wait(0) is False
    latch.set()
    for _ in range(3):  # a waiter leaves it open for the next
        assert latch.wait(0) is True
        assert latch.wait() is True


def test_every_blocked_waiter_passes_when_it_opens() -> None:
    latch = Latch()
    passed: list[bool] = []
    waiters = [threading.Thread(target=lambda: passed.append(latch.wait(10))) for _ in range(8)]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.05)
    assert passed == []  # all still blocked
    latch.set()
    for waiter in waiters:
        waiter.join(5)
    assert passed == [True] * 8
