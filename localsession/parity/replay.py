"""Answering from a cassette: ``localsession serve --replay DIR`` and
``localsession.mock(replay=DIR)`` (docs/parity.md#replay).

:class:`Replayer` normalises each incoming request exactly as the recording did
(normalise.py) and answers with the first unused recorded exchange whose request is equal;
failing that, one equal once placeholder numbers are ignored (a concurrent loop may meet
its values in another order); failing that, for a ``GET`` (a poll), the last exchange it
matched again. A response's placeholders expand to this run's own values for what the
client minted (its session name, its tokens) and to the recorded examples for what the
server minted, which the client then sends back and which map to the same placeholders.

A request with nothing to match gets HTTP 400 ``ReplayMismatchException`` at once, whose
message names the closest recorded request and how the two differ; the SDK raises it, so
nothing waits. :attr:`Replayer.misses` keeps every such message.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localsession.parity import compare
from localsession.parity.asgi import read_request, send_response
from localsession.parity.cassette import Cassette, decode_body, load, request_record
from localsession.parity.normalise import PLACEHOLDER_RE, Normaliser, strip_numbers

MISMATCH = "ReplayMismatchException"


def _key(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _describe(record: dict[str, Any]) -> str:
    target = record.get("headers", {}).get("x-amz-target")
    query = f"?{record['query']}" if record.get("query") else ""
    return f"{record['method']} {record['path']}{query}" + (f" ({target})" if target else "")


class Replayer:
    """One replay of one cassette (see the module doc); thread-safe."""

    def __init__(self, cassette: Cassette) -> None:
        self.cassette = cassette
        self.norm = Normaliser()
        self.used: set[int] = set()
        self.misses: list[str] = []
        self._mutex = threading.Lock()
        self._exact: dict[str, list[int]] = {}
        self._loose: dict[str, list[int]] = {}
        self._last: dict[str, int] = {}
        #: Called after each answer with (the request, as "METHOD path (target)", the status,
        #: the recorded exchange's number or None, the mismatch message or None).
        self.on_answer: Callable[[str, int, int | None, str | None], None] | None = None
        for index, exchange in enumerate(cassette.exchanges):
            request = exchange["request"]
            self._exact.setdefault(_key(request), []).append(index)
            self._loose.setdefault(_key(strip_numbers(request)), []).append(index)

    @classmethod
    def from_path(cls, location: Path) -> Replayer:
        return cls(load(location))

    # -- matching --------------------------------------------------------------------------

    def answer(
        self, method: str, path: str, query: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for one request."""
        with self._mutex:
            request = request_record(self.norm, method, path, query, headers, raw)
            index = self._match(request)
            if index is None:
                message = self._miss_message(request)
                self.misses.append(message)
                answer = self._error(request, message)
            else:
                self.used.add(index)
                self._last[_key(strip_numbers(request))] = index
                response = self.cassette.exchanges[index]["response"]
                body = decode_body(response.get("body"), self._expand)
                answer = int(response["status"]), dict(response.get("headers") or {}), body
        if self.on_answer is not None:
            if index is None:
                self.on_answer(_describe(request), answer[0], None, message)
            else:
                number = int(self.cassette.exchanges[index].get("seq", index + 1))
                self.on_answer(_describe(request), answer[0], number, None)
        return answer

    def _match(self, request: dict[str, Any]) -> int | None:
        for table, key in (
            (self._exact, _key(request)),
            (self._loose, _key(strip_numbers(request))),
        ):
            for candidate in table.get(key, []):
                if candidate not in self.used:
                    return candidate
        if request["method"] == "GET":  # a poll repeated past the recording: same answer
            return self._last.get(_key(strip_numbers(request)))
        return None

    def _resolve(self, placeholder: str) -> str:
        match = PLACEHOLDER_RE.fullmatch(placeholder)
        if match is not None and match[2] == "c":
            for raw, known in self.norm.table.items():
                if known == placeholder:
                    return raw
        example = self.cassette.examples.get(placeholder, placeholder)
        self.norm.learn(placeholder, example)
        return example

    def _expand(self, value: Any) -> Any:
        from localsession.parity.normalise import expand

        return expand(value, self._resolve)

    # -- misses ----------------------------------------------------------------------------

    def _miss_message(self, request: dict[str, Any]) -> str:
        loose = strip_numbers(request)
        exact_tol = {"default": {"rtol": 0.0, "atol": 0.0}}
        best: tuple[float, int, list[str]] | None = None
        for index, exchange in enumerate(self.cassette.exchanges):
            recorded = strip_numbers(exchange["request"])
            lines = compare.diff(recorded, loose, exact_tol)
            head = sum(recorded.get(k) != loose.get(k) for k in ("method", "path", "headers"))
            score = 1000.0 * head + len(lines) + (0.5 if index in self.used else 0.0)
            if best is None or score < best[0]:
                best = (score, index, lines)
        where = (
            f"cassette {self.cassette.path.name}: {len(self.cassette.exchanges)} exchanges, "
            f"{len(self.cassette.exchanges) - len(self.used)} not yet replayed"
        )
        text = f"replay: no recorded request matches {_describe(request)} ({where})."
        if best is None:
            return text + " The cassette holds no exchanges."
        _, index, lines = best
        recorded = self.cassette.exchanges[index]
        closest = f"#{recorded.get('seq', index + 1)} {_describe(recorded['request'])}"
        if not lines:
            return (
                f"{text} It equals recorded request {closest}, which was already replayed: "
                "the loop sent it more often than the recorded run did."
            )
        return f"{text} Closest recorded request: {closest}; it differs in:\n" + compare.summarise(
            lines
        )

    def _error(self, request: dict[str, Any], message: str) -> tuple[int, dict[str, str], bytes]:
        if request["path"] == "/" and request["method"] == "POST":  # json 1.1
            body = {"__type": MISMATCH, "message": message}
            return 400, {"content-type": "application/x-amz-json-1.1"}, json.dumps(body).encode()
        headers = {"content-type": "application/json", "x-amzn-errortype": MISMATCH}
        return 400, headers, json.dumps({"message": message}).encode()


def replay_app(replayer: Replayer) -> Any:
    """A bare ASGI app answering every HTTP request from ``replayer`` (and the health
    probe ``/_localsession/health``)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers, query, request_body = await read_request(scope, receive)
        path = scope["path"]
        if path == "/_localsession/health":
            status, out, body = 200, {"content-type": "application/json"}, b'{"status":"ok"}'
        else:
            status, out, body = replayer.answer(scope["method"], path, query, headers, request_body)
        await send_response(send, status, out, body)

    return app


def mock_app(location: Path, home: Path, model_map: dict[str, str], cache: Path) -> Any:
    """(replayer, ASGI app) for ``localsession.mock(replay=...)``. The tokenizers of the
    mapped and built-in names are exported into ``cache`` for the SDK's get_tokenizer(), as
    a live mock's Hub does."""
    from localsession.runtime.models import hub
    from localsession.runtime.models.catalog import BUILTIN_MODELS
    from localsession.wiring import server_catalog

    replayer = Replayer.from_path(location)
    catalog = server_catalog(home, model_map)
    for name in [*model_map, *BUILTIN_MODELS]:
        try:
            hub.export_tokenizer(catalog, catalog.canonical_name(name), cache)
        except Exception:  # noqa: BLE001 - a loop that needs it says which one is missing
            pass
    return replayer, replay_app(replayer)
