"""Volatile values out, secrets out: what a cassette or a snapshot may hold.

A :class:`Normaliser` walks JSON values (and URL paths) in the order a run produced them and
replaces what changes from run to run with placeholders, numbered by first appearance:

- ARNs naming an account (``arn:aws:...:123456789012:...``), part by part: the account is
  zeroed and each part of the resource normalised as below, so a session's ARN becomes
  ``arn:aws:sagemaker:<region>:000000000000:training-session/<session:c1>`` and a replay
  answers each session with its own ARN; an ARN with no volatile part (a role, a package)
  becomes one placeholder, ``<arn:s1>``;
- UUIDs (operation ids, client tokens) -> ``<uuid:c2>``;
- training-session names (the ``TrainingSessionName`` keys, the SDK's default names
  ``sagemaker-training-session-<8 hex>``, and those names inside paths and other strings)
  -> ``<session:c1>``;
- times (keys ending in ``Time``, ``Timestamp`` or ``Date``) -> a fixed time of the same
  type (:data:`FIXED_EPOCH`, :data:`FIXED_ISO`); request ids -> ``<request-id>``;
- a bare 12-digit account id inside a string -> ``000000000000``.

The letter says who minted the value first: ``s`` the server (its replay serves the recorded
example), ``c`` the client (a replay echoes whatever the client sent this time). Each new
placeholder's example value is kept, with account ids zeroed, so a replay can answer with it.

Secrets: :func:`redact` drops keys that hold credentials (``SecretAccessKey``,
``SessionToken``, ``Authorization``, ...), and :meth:`Normaliser.scrub` replaces every
known secret string (the caller's access key, secret and session token) wherever it occurs.
Headers are never stored except the few in :data:`KEPT_REQUEST_HEADERS` and
:data:`KEPT_RESPONSE_HEADERS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

ARN_RE = re.compile(r"^arn:aws[a-z-]*:[a-z0-9-]*:[a-z0-9-]*:\d{12}:\S+$")
#: The parts of an ARN: ``arn:<partition>:<service>:<region>:<account>:`` and the resource.
ARN_PARTS_RE = re.compile(r"^(arn:aws[a-z-]*:[a-z0-9-]*:[a-z0-9-]*:)(\d{12})(:)(\S+)$")
#: Resource types whose next part is a training-session name.
SESSION_RESOURCES = frozenset({"training-session", "training-sessions"})
UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
ACCOUNT_RE = re.compile(r"(?<![0-9])[0-9]{12}(?![0-9])")
PLACEHOLDER_RE = re.compile(r"<([a-z-]+):([sc])(\d+)>")
#: The SDK's default session names (``DEFAULT_SESSION_NAME_PREFIX`` + 8 hex digits).
SESSION_RE = re.compile(r"sagemaker-training-session-[0-9a-f]{8}(?![0-9a-f])")
TIME_KEY_RE = re.compile(r"(Time|Timestamp|Date|time|timestamp|At)$")
SESSION_KEYS = frozenset({"TrainingSessionName", "trainingSessionName"})
REQUEST_ID_KEYS = frozenset({"RequestId", "requestId", "x-amzn-requestid", "x-amz-request-id"})
#: Keys whose values are credentials: dropped wherever they appear.
SECRET_KEY_RE = re.compile(
    r"^(authorization|x-amz-security-token|x-amz-signature|x-amz-credential|"
    r".*secret.*|.*password.*|sessiontoken|session_token|accesskeyid|access_key_id|"
    r"aws_access_key_id|credentials?)$",
    re.IGNORECASE,
)
KEPT_REQUEST_HEADERS = ("content-type", "x-amz-target")
KEPT_RESPONSE_HEADERS = ("content-type", "x-amzn-errortype", "content-range", "accept-ranges")
FIXED_EPOCH = 946684800.0  # 2000-01-01T00:00:00Z
FIXED_ISO = "2000-01-01T00:00:00Z"
REDACTED = "<redacted>"
ZERO_ACCOUNT = "000000000000"


def redact(node: Any) -> Any:
    """``node`` without any dict entry whose key names a credential."""
    if isinstance(node, dict):
        return {k: redact(v) for k, v in node.items() if not SECRET_KEY_RE.match(str(k))}
    if isinstance(node, list | tuple):
        return [redact(v) for v in node]
    return node


def strip_numbers(node: Any) -> Any:
    """``node`` with placeholder numbers erased (``<uuid:c3>`` -> ``<uuid>``): the loose
    match a replay falls back to when concurrency ordered a run's values differently."""
    if isinstance(node, dict):
        return {k: strip_numbers(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [strip_numbers(v) for v in node]
    if isinstance(node, str):
        return PLACEHOLDER_RE.sub(lambda m: f"<{m[1]}>", node)
    return node


class Normaliser:
    """One run's table of volatile values and their placeholders (see the module doc)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        #: raw value -> placeholder
        self.table: dict[str, str] = {}
        #: placeholder -> example value (what a replay answers with)
        self.examples: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)
        self._sessions: list[str] = []

    # -- secrets ---------------------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """``text`` with every known secret string replaced by ``<redacted>``."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    # -- placeholders ----------------------------------------------------------------------

    def _placeholder(self, kind: str, raw: str, origin: str) -> str:
        found = self.table.get(raw)
        if found is not None:
            return found
        self.counts[kind] = self.counts.get(kind, 0) + 1
        placeholder = f"<{kind}:{origin}{self.counts[kind]}>"
        self.table[raw] = placeholder
        self.examples[placeholder] = ACCOUNT_RE.sub(ZERO_ACCOUNT, self.scrub(raw))
        if kind == "session":
            self._sessions.append(raw)
        return placeholder

    def learn(self, placeholder: str, raw: str) -> None:
        """Tie ``raw`` to an existing ``placeholder`` (a replay serving its example)."""
        self.table.setdefault(raw, placeholder)
        match = PLACEHOLDER_RE.fullmatch(placeholder)
        if match is not None:
            kind, number = match[1], int(match[3])
            self.counts[kind] = max(self.counts.get(kind, 0), number)
            if kind == "session" and raw not in self._sessions:
                self._sessions.append(raw)

    def string(self, text: str, origin: str, key: str = "") -> str:
        if text in self.table:
            return self.table[text]
        if key in SESSION_KEYS and text:
            return self._placeholder("session", text, origin)
        if key in REQUEST_ID_KEYS:
            return "<request-id>"
        if ARN_RE.match(text):
            return self.arn(text, origin)
        if UUID_RE.match(text):
            return self._placeholder("uuid", text, origin)
        for name in self._sessions:  # a session name inside a longer string (an S3 URI)
            if name in text:
                text = text.replace(name, self.table[name])
        text = SESSION_RE.sub(lambda m: self._placeholder("session", m[0], origin), text)
        return ACCOUNT_RE.sub(ZERO_ACCOUNT, self.scrub(text))

    def arn(self, text: str, origin: str) -> str:
        """An ARN normalised part by part (the account zeroed, a session name or UUID in its
        resource a placeholder), or one ``<arn:...>`` placeholder when no part of it is
        volatile but the account."""
        match = ARN_PARTS_RE.match(text)
        if match is None:  # pragma: no cover - ARN_RE matched, so the parts do
            return self._placeholder("arn", text, origin)
        head, _, colon, resource = match.groups()
        parts = resource.split("/")
        out = []
        for index, part in enumerate(parts):
            if index == 1 and parts[0] in SESSION_RESOURCES and part:
                out.append(self._placeholder("session", part, origin))
            elif part in self.table or UUID_RE.match(part):
                out.append(self.string(part, origin))
            else:
                out.append(self.string(part, origin) if SESSION_RE.search(part) else part)
        if out == parts:  # nothing volatile inside: the ARN as a whole stands for itself
            return self._placeholder("arn", text, origin)
        normalised = head + ZERO_ACCOUNT + colon + "/".join(out)
        return ACCOUNT_RE.sub(ZERO_ACCOUNT, self.scrub(normalised))

    def value(self, node: Any, origin: str, key: str = "") -> Any:
        """A JSON value with volatile parts replaced; ``origin`` is ``"c"`` for what the
        client sent, ``"s"`` for what the server answered."""
        if isinstance(node, dict):
            return {
                k: self.value(v, origin, str(k))
                for k, v in node.items()
                if not SECRET_KEY_RE.match(str(k))
            }
        if isinstance(node, list | tuple):
            return [self.value(v, origin, key) for v in node]
        if key and TIME_KEY_RE.search(key) and not isinstance(node, bool):
            if isinstance(node, int | float):
                return FIXED_EPOCH
            if isinstance(node, str):
                return FIXED_ISO
        if isinstance(node, str):
            return self.string(node, origin, key)
        return node

    def path(self, path: str, origin: str = "c") -> str:
        """A URL path with known volatile segments (and UUIDs) replaced."""
        parts = []
        for segment in path.split("/"):
            if segment in self.table:
                parts.append(self.table[segment])
            elif UUID_RE.match(segment):
                parts.append(self._placeholder("uuid", segment, origin))
            else:
                parts.append(self.string(segment, origin) if segment else segment)
        return "/".join(parts)

    def query(self, query: str, origin: str = "c") -> str:
        """A query string without signature parameters, values normalised."""
        from urllib.parse import parse_qsl, urlencode

        kept = [
            (k, self.string(v, origin))
            for k, v in parse_qsl(query, keep_blank_values=True)
            if not SECRET_KEY_RE.match(k) and not k.lower().startswith("x-amz-")
        ]
        return urlencode(kept)


def expand(node: Any, resolve: Any) -> Any:
    """``node`` with each placeholder replaced by ``resolve(placeholder)`` (a replay's
    answer: the client's own node for ``c`` placeholders, the example for ``s`` ones)."""
    if isinstance(node, dict):
        return {k: expand(v, resolve) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [expand(v, resolve) for v in node]
    if isinstance(node, str) and "<" in node:
        return PLACEHOLDER_RE.sub(lambda m: str(resolve(m[0])), node)
    return node


def add_secret(norm: Normaliser, secret: str | None) -> None:
    """Also scrub ``secret`` (a credential met at run time) from everything written."""
    if secret and len(secret) >= 4 and secret not in norm.secrets:
        norm.secrets.append(secret)
        norm.secrets.sort(key=len, reverse=True)
