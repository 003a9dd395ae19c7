"""Who may read the console under ``serve --auth``: the same key as the Tinker API.

The page and its scripts and styles (``/console/`` and ``/console/static/``) hold no data and
are served to anyone who can reach the server; the page then asks for the key. Every
``/console/api/`` request must carry it, as ``Authorization: Bearer <key>`` where the key is
the ``--auth`` SECRET or the Tinker API key ``tml-<SECRET>`` (the SDKs' ``TINKER_API_KEY``),
or be a signed link: ``?expires=<epoch s>&signature=<hex>``, an HMAC-SHA256 by the secret
of the path and the expiry, which is what Tinker's ``export-trace`` downloads (its client
sends no header with the URL the server hands it, as with the hosted service's signed URLs).
A refusal is HTTP 403 (server/auth.py raises it, in the console's JSON error shape).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import parse_qs, urlencode

#: Where the console lives, and its JSON API (the prefix the key guards).
CONSOLE_PATH = "/console"
API_PATH = "/console/api/"
#: How long a signed link stays good (seconds), as the hosted export's "about an hour".
SIGNED_FOR_S = 3600


def _mac(secret: str, path: str, expires: int) -> str:
    return hmac.new(secret.encode(), f"{path}\n{expires}".encode(), hashlib.sha256).hexdigest()


def signed_query(secret: str, path: str, now: float | None = None) -> str:
    """The query string that lets ``path`` be fetched without a key for SIGNED_FOR_S."""
    expires = int((time.time() if now is None else now) + SIGNED_FOR_S)
    return urlencode({"expires": expires, "signature": _mac(secret, path, expires)})


def allowed(secret: str, path: str, query: str, authorization: str) -> bool:
    """Whether a console request may be answered (see the module doc)."""
    if not path.startswith(API_PATH):
        return True
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        given = token.strip().encode()
        return any(hmac.compare_digest(given, key.encode()) for key in (secret, f"tml-{secret}"))
    params = parse_qs(query)
    try:
        expires = int(params["expires"][0])
        signature = params["signature"][0]
    except (KeyError, IndexError, ValueError):
        return False
    return expires >= time.time() and hmac.compare_digest(
        signature.encode(), _mac(secret, path, expires).encode()
    )
