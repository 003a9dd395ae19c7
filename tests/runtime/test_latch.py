"""The op's ``Latch`` (closed until set; every waiter, then and later, passes once it
opens) and the one finish that opens it."""

from __future__ import annotations

import threading
import time

from localsession.runtime.sessions.operations import Latch, Operation


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


def test_an_op_finishes_once_and_later_finishes_change_nothing() -> None:
    op = Operation(kind="forwardBackward")
    seen: list[str] = []
    op.add_done_callback(lambda: seen.append(op.status))
    racers = [
        threading.Thread(target=op.finish, args=(status,), kwargs={"error": status})
        for status in ("Completed", "Failed", "Skipped") * 4
    ]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(5)
    op.finish("Failed", error="late")  # the latch is not opened twice: no error here
    assert op.done.wait(0) and seen == [op.status] and op.error == op.status
    op.add_done_callback(lambda: seen.append("after"))  # a terminal op calls back at once
    assert seen == [op.status, "after"]
