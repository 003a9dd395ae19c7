"""The torch thread policy (engine/thread_policy.py): its decision on stated inputs, the
``/proc/stat`` arithmetic of its monitor, the environment switch, and that the decoder and
the trainer run on the count it chooses (other processes' load is stated, not produced)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from localsession.engine import sampling, thread_policy, torch_engine
from localsession.engine.thread_policy import THREADS_ENV, CpuMonitor, choose_threads
from localsession.engine.torch_engine import TorchEngine
from localsession.engine_options import EngineOptions
from localsession.port import SampleRequest

from .helpers import make_datum, random_tokens


@pytest.mark.parametrize(
    ("cpus", "others", "current", "peers", "chosen"),
    [
        (2, 0.0, 2, 1, 2),  # idle: every CPU
        (2, 0.0, 1, 1, 2),  # idle again: back up
        (2, 1.0, 2, 1, 1),  # a burner on one core
        (2, 0.67, 2, 1, 1),  # the burner's share beside our two threads
        (2, 1.0, 1, 1, 1),
        (2, 0.3, 2, 1, 2),  # light load: two threads stay...
        (2, 0.3, 1, 1, 1),  # ...but one does not rise (hysteresis)
        (2, 0.1, 1, 1, 2),  # the second core is nearly free: rise
        (2, 2.0, 2, 1, 1),  # saturated: never below one
        (2, 11.0, 2, 1, 1),  # more busy than CPUs (a load-average estimate)
        (2, -0.05, 1, 1, 2),  # tick rounding below zero counts as idle
        (1, 0.0, 1, 1, 1),
        (8, 3.2, 8, 1, 5),  # 4.8 cores free: keep floor(4.8 + 0.5)
        (8, 3.2, 2, 1, 4),  # rise to floor(4.8 + 0.15)
        (8, 0.0, 8, 1, 8),
        (2, 0.0, 2, 2, 1),  # a sampler beside a training op: a core each
        (16, 0.0, 16, 2, 8),
        (16, 4.0, 3, 3, 4),  # 12 free cores among 3 peers
        (4, 0.0, 9, 1, 4),  # a count above the CPUs is brought down to them
    ],
)
def test_choose_threads(cpus: int, others: float, current: int, peers: int, chosen: int) -> None:
    assert choose_threads(cpus, others, current, peers) == chosen


def test_choose_threads_rejects_impossible_inputs() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        choose_threads(0, 0.0, 1)
    with pytest.raises(ValueError, match="must be >= 1"):
        choose_threads(2, 0.0, 1, peers=0)


def test_the_option_reads_the_switch() -> None:
    assert EngineOptions.parse({}).threads == 0  # auto
    for auto in ("auto", " AUTO ", ""):
        assert EngineOptions.parse({THREADS_ENV: auto}).threads == 0
    assert EngineOptions.parse({THREADS_ENV: "3"}).threads == 3
    for bad in ("0", "-1", "two", "1.5", "2 threads"):
        with pytest.raises(ValueError, match=rf"{THREADS_ENV}=.*'auto'.*whole number"):
            EngineOptions.parse({THREADS_ENV: bad})


def stat_text(cpu0: tuple[int, ...], cpu1: tuple[int, ...]) -> str:
    """A /proc/stat with two CPUs (user nice system idle iowait irq softirq steal)."""
    total = [a + b for a, b in zip(cpu0, cpu1, strict=True)]
    line = lambda name, f: f"{name} {' '.join(map(str, f))} 0 0"  # noqa: E731
    return "\n".join([line("cpu ", total), line("cpu0", cpu0), line("cpu1", cpu1), "intr 1 2"])


def test_monitor_counts_other_processes_busy_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = SimpleNamespace(now=100.0, own=5.0)
    fake_time = SimpleNamespace(monotonic=lambda: clock.now, process_time=lambda: clock.own)
    monkeypatch.setattr(thread_policy, "time", fake_time)
    monkeypatch.setattr(thread_policy.os, "getloadavg", lambda: (0.7, 0.5, 0.2))
    stat = tmp_path / "stat"
    stat.write_text(stat_text((100, 0, 50, 1000, 10, 0, 0, 0), (200, 0, 0, 900, 0, 0, 0, 0)))
    monitor = CpuMonitor(stat)
    monitor._cpus, monitor._tick = [0, 1], 100
    assert monitor.others_busy() == pytest.approx(0.7)  # no window yet: the load average

    # 1 s later: 150 busy ticks (1.5 s; iowait and idle do not count), 0.5 s of them ours
    clock.now, clock.own = 101.0, 5.5
    stat.write_text(stat_text((180, 0, 60, 1010, 30, 0, 0, 0), (250, 5, 5, 950, 0, 0, 0, 0)))
    assert monitor.others_busy() == pytest.approx(1.0)

    # a window under MIN_WINDOW_S keeps the last estimate, whatever the file says
    clock.now = 101.05
    stat.write_text(stat_text((280, 0, 60, 1010, 30, 0, 0, 0), (250, 5, 5, 950, 0, 0, 0, 0)))
    assert monitor.others_busy() == pytest.approx(1.0)

    # 0.95 s after the last reading: 100 ticks busy and all of them ours: nothing else
    clock.now, clock.own = 101.95, 6.5
    assert monitor.others_busy() == pytest.approx(0.0)

    # steal time is busy; the estimate never exceeds the CPUs
    clock.now = 102.95
    stat.write_text(stat_text((380, 0, 60, 1010, 30, 0, 0, 200), (350, 5, 5, 950, 0, 0, 0, 0)))
    assert monitor.others_busy() == pytest.approx(2.0)


def test_the_first_window_opens_when_the_monitor_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first op after the engine's import reads a real window, not the load average
    (which counts this process's own work, e.g. loading the model, as other processes')."""
    clock = SimpleNamespace(now=50.0, own=2.0)
    fake_time = SimpleNamespace(monotonic=lambda: clock.now, process_time=lambda: clock.own)
    monkeypatch.setattr(thread_policy, "time", fake_time)
    monkeypatch.setattr(thread_policy, "affinity", lambda: {0, 1})
    monkeypatch.setattr(thread_policy.os, "getloadavg", lambda: (1.9, 1.0, 0.5))
    stat = tmp_path / "stat"
    stat.write_text(stat_text((100, 0, 0, 1000, 0, 0, 0, 0), (100, 0, 0, 1000, 0, 0, 0, 0)))
    monitor = CpuMonitor(stat)
    monitor._tick = 100
    # 4 s later: 7.6 s busy on the two CPUs, 7.2 s of them this process's (loading a model)
    clock.now, clock.own = 54.0, 9.2
    stat.write_text(stat_text((480, 0, 0, 1010, 0, 0, 0, 0), (480, 0, 0, 1010, 0, 0, 0, 0)))
    assert monitor.others_busy() == pytest.approx(0.1)
    assert choose_threads(2, monitor.others_busy(), current=2) == 2


@pytest.fixture
def policy(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Two CPUs, torch's count before any op 2, and other processes' load as stated."""
    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.setattr(thread_policy, "affinity", lambda: {0, 1})
    monkeypatch.setattr(thread_policy, "_ceiling", 2)
    monkeypatch.setattr(thread_policy, "_quota", None)
    monkeypatch.setattr(thread_policy, "_chosen", None)
    busy = {"cores": 0.0}
    monkeypatch.setattr(thread_policy._MONITOR, "others_busy", lambda: busy["cores"])

    def set_busy(cores: float) -> None:
        busy["cores"] = cores

    return set_busy


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("two_threads")
def test_scope_sets_the_count_and_restores_it(
    policy: Callable[[float], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    policy(1.2)
    with thread_policy.scope():
        assert torch.get_num_threads() == 1
        with thread_policy.scope():  # nested: the outer scope's count
            assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    policy(0.0)
    with thread_policy.scope():
        assert torch.get_num_threads() == 2
    policy(2.0)
    with thread_policy.scope(3):  # a fixed count (EngineOptions.threads), whatever the load
        assert torch.get_num_threads() == 3
        thread_policy.revisit()
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == 2


@pytest.mark.usefixtures("two_threads")
def test_threads_running_ops_at_once_share_the_cores(policy: Callable[[float], None]) -> None:
    inside, leave = threading.Event(), threading.Event()
    seen: list[int] = []

    def other_op() -> None:
        torch.set_num_threads(2)
        with thread_policy.scope():
            seen.append(torch.get_num_threads())
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other_op)
    thread.start()
    try:
        assert inside.wait(10)
        with thread_policy.scope():
            assert torch.get_num_threads() == 1  # a core each
    finally:
        leave.set()
        thread.join()
    assert seen == [2]  # alone when it started


@pytest.mark.usefixtures("two_threads")
def test_the_decoder_revisits_the_count_between_steps(
    policy: Callable[[float], None],
    make_engine: Callable[..., TorchEngine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = make_engine()
    monkeypatch.setattr(thread_policy, "REVISIT_S", 0.0)  # look at every step
    counts: list[int] = []

    def hook(steps: int) -> None:
        counts.append(torch.get_num_threads())
        if steps == 3:
            policy(1.5)  # another process takes a core
        if steps == 6:
            policy(0.0)  # and gives it back

    remove = sampling.add_step_hook(hook)
    try:
        request = SampleRequest([257, 72, 105], num_samples=2, max_tokens=9, temperature=0)
        engine.sample(None, [request])
    finally:
        remove()
    # the hook runs before each step's look: step k sees the count chosen after step k-1
    assert counts == [2, 2, 2, 1, 1, 1, 2, 2, 2]
    assert torch.get_num_threads() == 2


@pytest.mark.usefixtures("two_threads")
def test_the_trainer_runs_on_the_chosen_count(
    policy: Callable[[float], None],
    make_engine: Callable[..., TorchEngine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = make_engine()
    counts: list[int] = []
    real_step = torch_engine.loss_step

    def counting(*args: Any, **kwargs: Any) -> Any:
        counts.append(torch.get_num_threads())
        return real_step(*args, **kwargs)

    monkeypatch.setattr(torch_engine, "loss_step", counting)
    datums = [make_datum(t) for t in random_tokens(2, 12, seed=3)]
    for busy in (0.0, 1.5, 0.3, 0.0):
        policy(busy)
        engine.forward_backward(datums, "cross_entropy", None, backward=True)
        assert torch.get_num_threads() == 2  # restored after the op
    # 0.3 busy after a contended op keeps one thread; a free core brings the second back
    assert counts == [2, 1, 1, 2]


def test_an_engine_runs_its_ops_with_its_fixed_count(
    make_engine: Callable[..., TorchEngine],
    policy: Callable[[float], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = make_engine(options=EngineOptions(threads=3))
    seen: list[int | None] = []
    real = thread_policy._apply

    def recording(state: Any, current: int) -> None:
        seen.append(state.fixed)
        real(state, current)

    monkeypatch.setattr(thread_policy, "_apply", recording)
    policy(2.0)  # busy cores: auto would pick fewer
    engine.forward_backward([make_datum([1, 2, 3, 4])], "cross_entropy", None, backward=True)
    assert seen == [3]
