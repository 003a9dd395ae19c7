"""Injected faults: make the next requests or operations fail the way the real service can.

One :class:`Faults` object lives on each ``Service`` (``service.faults``). Tests arm it
directly (the ``fakes`` package does), and the HTTP server exposes it through an admin route,
so every front end sees the same faults. The runtime consults it at four points:

- ``on_request()`` at the top of every runtime call (``Execute*Operation`` and
  ``Get*OperationResult``): a pending throttle refuses the request with
  ``ThrottlingException`` (HTTP 429), which the SDK retries with backoff;
- ``on_submit(kind)`` once an ``Execute*Operation`` request is valid, before the op is
  queued: an ``at="submit"`` fault refuses it with a service error code (the default,
  ``ValidationException``, is not retried, so the caller's future raises ``ClientError``);
- ``on_execute(kind)`` when an accepted op is about to run: an ``at="execution"`` fault makes
  it finish ``Failed`` with a message (the caller's future raises ``OperationError``) and
  changes no state, like any failed op (docs/semantics.md#4);
- ``on_start(kind)`` just before that: a ``slow_next`` fault makes the op take that many
  seconds longer (it sleeps while marked running, then runs as usual), so a test can have a
  slow op running at a chosen moment (a ``stop()`` or ``delete()`` while it runs).

Each armed fault is consumed by the request or op it hits. ``armed`` is False whenever
nothing is pending, and the runtime checks it before calling a hook, so an idle ``Faults``
costs one attribute read per call.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from localsession import vocab
from localsession.runtime.errors import ServiceError

#: SDK method names accepted in place of wire kinds.
ALIASES: dict[str, str] = {m: k for m, k in vocab.KIND_OF_METHOD.items() if m != k}
AT = ("submit", "execution")


def normalise_kinds(kind: str | Collection[str]) -> frozenset[str] | None:
    """Wire kinds for ``kind`` (a kind, an SDK method name, ``"*"``, or several); None = all."""
    names = [kind] if isinstance(kind, str) else list(kind)
    if not names:
        raise ValueError("fault kind: give at least one operation kind")
    kinds: set[str] = set()
    for name in names:
        if name == "*":
            return None
        wire = ALIASES.get(name, name)
        if wire not in vocab.OP_KINDS:
            raise ValueError(
                f"fault kind {name!r} is not an operation kind; use one of "
                f"{', '.join(vocab.OP_KINDS)}, an SDK method name ({', '.join(ALIASES)}) or '*'"
            )
        kinds.add(wire)
    return frozenset(kinds)


@dataclass
class _Rule:
    kinds: frozenset[str] | None  # None: every kind
    remaining: int
    at: str
    code: str
    message: str | None

    def matches(self, kind: str, at: str) -> bool:
        return self.at == at and (self.kinds is None or kind in self.kinds)

    def describe(self) -> dict[str, Any]:
        return {
            "kinds": sorted(self.kinds) if self.kinds is not None else ["*"],
            "remaining": self.remaining,
            "at": self.at,
            "code": self.code if self.at == "submit" else None,
            "message": self.message,
        }


def _check_count(count: Any) -> int:
    if type(count) is not int or count < 1:
        raise ValueError(f"fault count must be an integer >= 1, got {count!r}")
    return count


class Faults:
    """Pending faults of one service. Thread-safe; every method may be called at any time."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._rules: list[_Rule] = []
        self._throttle = 0
        #: Pending slow-downs: [kinds (None: every kind), ops left, seconds each].
        self._slow: list[tuple[frozenset[str] | None, int, float]] = []
        #: Whether any fault is pending (the runtime's zero-cost check before each hook).
        self.armed = False

    # -- arming --------------------------------------------------------------------------

    def fail_next(
        self,
        kind: str | Collection[str],
        count: int = 1,
        *,
        at: str = "execution",
        code: str | None = None,
        message: str | None = None,
    ) -> None:
        """Fail the next ``count`` ops of ``kind``.

        ``kind``: a wire op kind (``"forwardBackward"``, ``"optimizerStep"``, ``"saveWeights"``,
        ``"sample"``, ...), an SDK method name (``"optim_step"``), ``"*"`` for any, or a
        collection of these. ``at="execution"``: the op is accepted, then finishes ``Failed``
        with ``message`` when it runs (``code`` must be None). ``at="submit"``: the request is
        refused with ``code`` (default ``ValidationException``; see ``vocab.RUNTIME_ERRORS``) and
        ``message``. Faults fire in the order they were armed.
        """
        kinds = normalise_kinds(kind)
        count = _check_count(count)
        if at not in AT:
            raise ValueError(f"fault at={at!r}: use 'submit' or 'execution'")
        if at == "execution" and code is not None:
            raise ValueError(
                "an at='execution' fault ends the op Failed with a message and has no error "
                f"code; drop code={code!r} or use at='submit'"
            )
        code = code or vocab.ErrorCode.VALIDATION
        if code not in vocab.RUNTIME_ERRORS:
            raise ValueError(f"fault code {code!r}: use one of {', '.join(vocab.RUNTIME_ERRORS)}")
        if message is not None and not isinstance(message, str):
            raise ValueError(f"fault message must be a string, got {type(message).__name__}")
        with self._mutex:
            self._rules.append(_Rule(kinds, count, at, code, message))
            self.armed = True

    def throttle_next(self, count: int) -> None:
        """Refuse the next ``count`` runtime requests with ``ThrottlingException`` (429)."""
        count = _check_count(count)
        with self._mutex:
            self._throttle += count
            self.armed = True

    def slow_next(self, kind: str | Collection[str], seconds: float, count: int = 1) -> None:
        """Make the next ``count`` ops of ``kind`` (as in :meth:`fail_next`) each take
        ``seconds`` longer: the op is marked running, waits, then runs and finishes as usual."""
        kinds = normalise_kinds(kind)
        count = _check_count(count)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise ValueError(f"slow seconds must be a number, got {seconds!r}")
        if not 0 < seconds <= 3600:
            raise ValueError(f"slow seconds must be in (0, 3600], got {seconds!r}")
        with self._mutex:
            self._slow.append((kinds, count, float(seconds)))
            self.armed = True

    def clear(self) -> None:
        """Drop every pending fault."""
        with self._mutex:
            self._rules.clear()
            self._slow.clear()
            self._throttle = 0
            self.armed = False

    def pending(self) -> dict[str, Any]:
        """What is still armed, as JSON: ``{"throttle": n, "failures": [rule, ...]}``."""
        with self._mutex:
            return {
                "throttle": self._throttle,
                "failures": [rule.describe() for rule in self._rules],
                "slow": [
                    {"kinds": sorted(k) if k is not None else ["*"], "remaining": n, "seconds": s}
                    for k, n, s in self._slow
                ],
            }

    # -- hooks the runtime calls ---------------------------------------------------------

    def on_request(self) -> None:
        """Raise ``ThrottlingException`` if a throttle is pending (consuming one)."""
        with self._mutex:
            if self._throttle <= 0:
                return
            self._throttle -= 1
            self._rearm()
        raise ServiceError(
            vocab.ErrorCode.THROTTLING,
            "Rate exceeded: the request was throttled (injected fault); retry with backoff.",
            429,
        )

    def on_submit(self, kind: str) -> None:
        """Raise the service error of a pending ``at="submit"`` fault for ``kind``."""
        rule = self._take(kind, "submit")
        if rule is None:
            return
        message = rule.message or (
            f"The service refused this {kind} request (injected fault: fail_next at submit)."
        )
        raise ServiceError(rule.code, message, vocab.RUNTIME_ERRORS[rule.code])

    def on_start(self, kind: str) -> float:
        """Seconds a pending ``slow_next`` fault adds to this op of ``kind`` (consuming one);
        0.0 if none applies."""
        with self._mutex:
            for i, (kinds, left, seconds) in enumerate(self._slow):
                if kinds is None or kind in kinds:
                    if left == 1:
                        del self._slow[i]
                    else:
                        self._slow[i] = (kinds, left - 1, seconds)
                    self._rearm()
                    return seconds
        return 0.0

    def on_execute(self, kind: str) -> str | None:
        """The failure message of a pending ``at="execution"`` fault for ``kind``, else None."""
        rule = self._take(kind, "execution")
        if rule is None:
            return None
        return rule.message or f"{kind} failed while running (injected fault: fail_next)."

    def _take(self, kind: str, at: str) -> _Rule | None:
        with self._mutex:
            for i, rule in enumerate(self._rules):
                if rule.matches(kind, at):
                    rule.remaining -= 1
                    if rule.remaining == 0:
                        del self._rules[i]
                    self._rearm()
                    return rule
        return None

    def _rearm(self) -> None:
        self.armed = bool(self._rules) or bool(self._slow) or self._throttle > 0
