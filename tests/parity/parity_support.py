"""Constants and helpers the parity tests share (a module of its own, so that no test
imports another folder's ``conftest``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# The launch post's GRPO loop (tests/mock/mock_blog.py), written against the SDK only.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mock"))

MAP = {"openai/gpt-oss-20b": "localsession/tiny"}
#: Planted credentials: none of them may reach a cassette.
UPSTREAM_KEY = "AKIAPLANTEDUPSTREAM7"
UPSTREAM_SECRET = "planted-upstream-secret-Zq81xW"
UPSTREAM_TOKEN = "planted-session-token-Hh62pL0"
CLIENT_KEY = "AKIAPLANTEDCLIENT042"
CLIENT_SECRET = "planted-client-secret-Rt55mN"


@dataclass
class Recording:
    """One recorded run: the cassette folder, the loop's results, what was signed."""

    out: Path
    seen: dict[str, Any]
    signatures: list[str] = field(default_factory=list)
    hf_cache: str = ""


def point_sdk(monkeypatch: pytest.MonkeyPatch, url: str, hf_cache: str) -> None:
    from localsession.server.endpoints import client_env

    for key, value in client_env(url, "us-west-2").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CLIENT_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CLIENT_SECRET)
    monkeypatch.setenv("HF_HUB_CACHE", hf_cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants  # read at import: an earlier test may have imported it

    monkeypatch.setattr(constants, "HF_HUB_CACHE", hf_cache)
