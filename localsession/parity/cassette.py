"""Cassettes: the JSON-lines file one recording run writes (docs/parity.md#cassettes).

Line 1 is the header (``{"kind": "header", "cassette": 1, ...}``: format version,
localsession version, date, the upstream's host, the tolerances replayed numbers compare
with). Every further line is one exchange, written as it completes::

    {"kind": "exchange", "seq": 7,
     "request": {"method": "POST", "path": "/v1/training-sessions/<session:c1>/operations",
                 "query": "", "headers": {"content-type": "..."}, "body": {"json": {...}}},
     "response": {"status": 200, "headers": {...}, "body": {"json": {"operationId": "<uuid:s3>"}}},
     "values": {"<uuid:s3>": "3572b281-..."}}

Bodies are ``{"json": value}`` (normalised; floats as Python writes them, which read back
bit for bit), ``{"base64": ...}`` for anything else, or ``null``. ``values`` holds the
example of each placeholder first written on that line (normalise.py).
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localsession._version import __version__

FORMAT = 1
SUFFIX = ".jsonl"


class CassetteError(ValueError):
    """A cassette that cannot be found or read: the message names the file and the fix."""


def encode_body(raw: bytes, content_type: str, normalise: Any) -> dict[str, Any] | None:
    """A body for the cassette: parsed and normalised when it is JSON."""
    if not raw:
        return None
    if "json" in content_type or raw[:1] in (b"{", b"["):
        try:
            return {"json": normalise(json.loads(raw))}
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
    return {"base64": base64.b64encode(raw).decode("ascii")}


def decode_body(body: dict[str, Any] | None, expand: Any) -> bytes:
    """The bytes a replay sends for a cassette body (placeholders expanded)."""
    if body is None:
        return b""
    if "json" in body:
        return json.dumps(expand(body["json"]), separators=(",", ":")).encode("utf-8")
    return base64.b64decode(body["base64"])


class CassetteWriter:
    """Appends one run's exchanges to ``DIR/<time>-<pid>.jsonl``, a line at a time."""

    def __init__(self, directory: Path, header: dict[str, Any]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        self.path = directory / f"{stamp}-{os.getpid()}{SUFFIX}"
        self._mutex = threading.Lock()
        self._seq = 0
        self._file = self.path.open("w", encoding="utf-8")
        self._write({"kind": "header", "cassette": FORMAT, "localsession": __version__, **header})

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def exchange(self, request: dict[str, Any], response: dict[str, Any], values: Any) -> int:
        """Write one exchange; ``values()`` is called under the lock for the examples of
        placeholders not written yet. Returns the exchange's number."""
        with self._mutex:
            self._seq += 1
            self._write(
                {
                    "kind": "exchange",
                    "seq": self._seq,
                    "request": request,
                    "response": response,
                    "values": values(),
                }
            )
            return self._seq

    @property
    def count(self) -> int:
        return self._seq

    def close(self) -> None:
        with self._mutex:
            self._file.close()


@dataclass
class Cassette:
    path: Path
    header: dict[str, Any]
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    examples: dict[str, str] = field(default_factory=dict)


def find(location: Path) -> Path:
    """``location`` if it is a file, else the newest cassette in that directory."""
    location = Path(location).expanduser()
    if location.is_file():
        return location
    if not location.is_dir():
        raise CassetteError(
            f"{location}: no such cassette or directory; record one with "
            "`localsession record --upstream URL --out DIR`"
        )
    found = sorted(location.glob(f"*{SUFFIX}"))
    if not found:
        raise CassetteError(
            f"{location}: holds no cassette (*{SUFFIX}); record one with "
            "`localsession record --upstream URL --out DIR`"
        )
    return found[-1]


def load(location: Path) -> Cassette:
    """Read a cassette (a file, or the newest in a directory)."""
    path = find(location)
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        records = [json.loads(line) for line in lines if line.strip()]
    except ValueError as exc:
        raise CassetteError(f"{path}: not a JSON-lines cassette ({exc})") from None
    if not records or records[0].get("kind") != "header":
        raise CassetteError(f"{path}: the first line is not a cassette header")
    if records[0].get("cassette") != FORMAT:
        raise CassetteError(
            f"{path}: cassette format {records[0].get('cassette')!r}; this localsession "
            f"reads format {FORMAT}"
        )
    cassette = Cassette(path, records[0])
    for record in records[1:]:
        if record.get("kind") == "exchange":
            cassette.exchanges.append(record)
            cassette.examples.update(record.get("values") or {})
    return cassette


def request_record(
    norm: Any, method: str, path: str, query: str, headers: dict[str, str], raw: bytes
) -> dict[str, Any]:
    """A request as a cassette stores it (and as a replay matches it): normalised, with
    only the headers that select an operation."""
    lower = {k.lower(): v for k, v in headers.items()}
    return {
        "method": method.upper(),
        "path": norm.path(path, "c"),
        "query": norm.query(query, "c"),
        "headers": {k: lower[k] for k in ("content-type", "x-amz-target") if k in lower},
        "body": encode_body(raw, lower.get("content-type", ""), lambda v: norm.value(v, "c")),
    }


def response_record(norm: Any, status: int, headers: dict[str, str], raw: bytes) -> dict[str, Any]:
    """A response as a cassette stores it: normalised, a few headers kept."""
    from localsession.parity.normalise import KEPT_RESPONSE_HEADERS

    lower = {k.lower(): v for k, v in headers.items()}
    return {
        "status": status,
        "headers": {k: norm.scrub(lower[k]) for k in KEPT_RESPONSE_HEADERS if k in lower},
        "body": encode_body(raw, lower.get("content-type", ""), lambda v: norm.value(v, "s")),
    }
