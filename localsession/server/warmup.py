"""``serve``'s tokenizer warm-up: export every listed model's tokenizer into the server's HF
cache on a background thread, say when it is done, and hold off Tinker clients until then.

A Tinker client loads its tokenizer from that cache (``HF_HUB_CACHE``, offline) on its own,
without asking the server; on a cold home a GGUF model's tokenizer takes seconds to convert,
and a client that got there first failed with "couldn't connect to huggingface.co". So:

- ``serve`` prints ``# ready: ...`` once every tokenizer is exported (the banner says to
  wait for it);
- until then, the Tinker requests after which a client loads a tokenizer (creating a training
  or sampling client, reading a model's info) are held up to ``hold_s`` seconds for it, then
  answered ``503`` with ``Retry-After``, which the tinker SDK retries (10 times by default:
  with the hold, minutes of cover for a slow conversion on a busy machine); everything else
  is served at once.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from localsession.runtime.models import hub
from localsession.runtime.models.catalog import ModelCatalog

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Tinker routes whose client loads a tokenizer next (tinker 0.38.0's training and sampling
#: clients read ``HF_HUB_CACHE`` right after these).
TOKENIZER_ROUTES = frozenset(
    {"/api/v1/create_model", "/api/v1/get_info", "/api/v1/create_sampling_session"}
)
#: Seconds a refused client is told to wait; the tinker SDK retries 10 times by default.
RETRY_AFTER_S = 2
#: Seconds a request that needs the tokenizers waits for them before it is refused: well
#: under the tinker SDK's request timeout.
HOLD_S = 15.0


class TokenizerWarmup:
    """Exports the catalog's tokenizers once (``run``, on a thread) and sets ``ready``."""

    def __init__(self, catalog: ModelCatalog, cache: Path, hold_s: float = HOLD_S) -> None:
        self.catalog = catalog
        self.cache = cache
        self.hold_s = hold_s
        self.ready = threading.Event()

    def start(self, say: Callable[[str], None]) -> threading.Thread:
        """Run the export on a daemon thread; ``say`` gets the ready line."""
        thread = threading.Thread(
            target=self.run, args=(say,), name="localsession-tokenizers", daemon=True
        )
        thread.start()
        return thread

    def run(self, say: Callable[[str], None]) -> None:
        started = time.monotonic()
        try:
            hub.export_all(self.catalog, self.cache)  # logs a model it cannot export
        finally:
            self.ready.set()
        names = ", ".join(self.catalog.names())
        say(
            f"# ready: tokenizers of {names} exported to HF_HUB_CACHE in "
            f"{time.monotonic() - started:.1f} s; clients may start"
        )

    def guard(self, app: Any) -> Callable[..., Awaitable[None]]:
        """``app``, holding :data:`TOKENIZER_ROUTES` until ready (up to ``hold_s``), then
        answering them 503 + Retry-After."""
        ready, hold_s = self.ready, self.hold_s

        async def guarded(scope: _Scope, receive: _Receive, send: _Send) -> None:
            if (
                ready.is_set()
                or scope["type"] != "http"
                or scope.get("path") not in TOKENIZER_ROUTES
                or await _wait(ready, hold_s)
            ):
                await app(scope, receive, send)
                return
            body = json.dumps(
                {
                    "detail": "The server is still exporting its models' tokenizers (a cold "
                    f"home takes seconds); retry in {RETRY_AFTER_S} s. `localsession serve` "
                    "prints '# ready: ...' once they are in HF_HUB_CACHE.",
                    "code": "ServiceUnavailable",
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", str(RETRY_AFTER_S).encode()),
                        (b"x-should-retry", b"true"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})

        return guarded


async def _wait(event: threading.Event, seconds: float) -> bool:
    """Whether ``event`` is set within ``seconds``, checked every 0.1 s without a thread."""
    deadline = time.monotonic() + seconds
    while not event.is_set():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)
    return True
