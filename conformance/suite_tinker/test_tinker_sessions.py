"""Sessions and models: the server's catalog, ``get_info`` and the tokenizer, LoRA seeds,
heartbeats, a session's end (``ServiceClient.close``) and its expiry when its heartbeats stop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.backends import tinker_compat as compat
from conformance.limits import undeclared
from conformance.suite_tinker._kit import logprobs_of, loss_of, needs_sdk, step, wait


def _low_level(backend: Backend) -> Any:
    return compat.low_level_client(backend.ts, backend.details["base_url"])


def test_the_catalog_lists_the_base_model(backend: Backend) -> None:
    """get_server_capabilities_response.py ``supported_models``: "List of models available
    on the server", each with a ``model_name``."""
    url = backend.details["base_url"]
    models = compat.server_models(backend.ts, url, _api_key())
    assert backend.base_model in [m.model_name for m in models]


def _api_key() -> str:
    import os

    return os.environ.get("TINKER_API_KEY") or "tml-conformance"


def test_get_info_describes_the_model(backend: Backend, new_trainer: Callable[..., Any]) -> None:
    """training_client.py ``get_info``: "Information about the model: its base model, LoRA
    configuration"; get_info_response.py ``model_data.model_name``, ``is_lora``,
    ``lora_rank``."""
    tc = new_trainer(seed=50)
    info = tc.get_info()
    assert info.model_data.model_name == backend.base_model
    assert info.is_lora and info.lora_rank == backend.limits.rank


def test_the_tokenizer_round_trips_text(backend: Backend, new_trainer: Callable[..., Any]) -> None:
    """training_client.py ``get_tokenizer``: "Get the tokenizer for the current model": it
    encodes to ids the model accepts and decodes them back to the text."""
    tc = new_trainer(seed=51)
    try:
        tokenizer = tc.get_tokenizer()
    except OSError as exc:  # transformers could not find or fetch the files
        pytest.fail(
            f"get_tokenizer() could not load {backend.base_model!r}'s tokenizer on this machine "
            f"({type(exc).__name__}: {str(exc)[:200]}); against a localsession serve, export "
            "the HF_HUB_CACHE and HF_HUB_OFFLINE lines its banner prints (conformance/README.md)"
        )
    text = "The capital of France is Paris."
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert loss_of(backend, tc, [*backend.prompt, *ids]) > 0.0


def test_a_lora_seed_makes_initialisation_reproducible(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """lora_config.py ``seed``: "Seed used for initialization of LoRA weights. Useful if you
    need deterministic or reproducible initialization of weights": two models with the same
    seed take the same first step; another seed another one (a zero-initialised B hides A
    until the first step, so the comparison is after it)."""
    a, b, other = new_trainer(seed=52), new_trainer(seed=52), new_trainer(seed=53)
    for tc in (a, b, other):
        step(backend, tc, tokens)
    la, lb, lo = (logprobs_of(backend, tc, tokens) for tc in (a, b, other))
    assert la == lb if backend.has("forward.bit_exact") else _near(la, lb, backend)
    assert not _near(la, lo, backend), "seed 53 started where seed 52 did"


def _near(a: list[float], b: list[float], backend: Backend) -> bool:
    atol = backend.limits.logprob_atol
    return all(abs(x - y) <= atol for x, y in zip(a, b, strict=True))


async def _create_session(backend: Backend, client: Any) -> str:
    """A new session through the low-level client (no heartbeat loop of the SDK's)."""
    request = backend.ts.types.CreateSessionRequest(
        tags=["conformance"], user_metadata=None, sdk_version=compat.sdk_version()
    )
    created = await client.service.create_session(request=request)
    assert created.session_id
    return str(created.session_id)


def test_heartbeats_keep_a_session_alive(backend: Backend) -> None:
    """resources/service.py ``create_session`` "Creates a new session" and
    ``session_heartbeat``: "Send a heartbeat for an active session to keep it alive"."""

    async def run() -> list[Any]:
        client = _low_level(backend)
        session_id = await _create_session(backend, client)
        return [await client.service.session_heartbeat(session_id=session_id)
                for _ in range(3)]  # fmt: skip

    beats = asyncio.run(run())
    assert all(beat.type == "session_heartbeat" for beat in beats)


def test_a_closed_session_refuses_heartbeats(backend: Backend) -> None:
    """service_client.py ``close``: "Marks the session terminal. Further operations against
    it will be rejected"; the SDK's heartbeat loop reads HTTP 410 as "Session ... has
    finished" (internal_client_holder.py)."""
    needs_sdk(backend, "service:close")
    client = backend.service_client()
    wait(client.create_lora_training_client(backend.base_model, rank=backend.limits.rank), backend)
    session_id = client.holder.get_session_id()
    wait(client.close("success"), backend)

    class Beat:
        def result(self, timeout: float | None = None) -> Any:
            beat = _low_level(backend).service.session_heartbeat
            return asyncio.run(beat(session_id=session_id, max_retries=0))

    status = compat.status_of(_raised(Beat))
    assert status == 410, f"a finished session answers HTTP {status}, not 410"


def _raised(call: Any) -> BaseException:
    try:
        call().result()
    except Exception as exc:  # noqa: BLE001 - returned to the caller
        return exc
    raise AssertionError("the call succeeded")


def test_two_service_clients_have_their_own_sessions(backend: Backend) -> None:
    """service_client.py: each ``ServiceClient`` opens a session (``create_session``) of its
    own."""
    a, b = backend.service_client(), backend.service_client()
    try:
        for c in (a, b):
            wait(
                c.create_lora_training_client(backend.base_model, rank=backend.limits.rank), backend
            )
        assert a.holder.get_session_id() != b.holder.get_session_id()
    finally:
        for c in (a, b):
            compat.end_session(c, backend.limits.op_timeout_s)


async def _beat(client: Any, session_id: str) -> int:
    """The HTTP status of one heartbeat of ``session_id`` (no retry)."""
    try:
        await client.service.session_heartbeat(session_id=session_id, max_retries=0)
    except Exception as exc:  # noqa: BLE001 - its status is the answer
        status = compat.status_of(exc)
        if status is None:
            raise
        return status
    return 200


def test_a_session_whose_heartbeats_stop_expires(backend: Backend) -> None:
    """resources/service.py ``session_heartbeat``: "Send a heartbeat for an active session to
    keep it alive"; internal_client_holder.py beats every 10 s, warns after 120 s without an
    answer that "the session will be terminated", and reads HTTP 410 as "Session ... has
    finished". Against the server's declared timeout T (``--heartbeat-timeout``): a session
    beaten every T/4 stays alive, and one left silent for 1.5 T + 5 s (room for a server that
    sweeps periodically) answers its next heartbeat with 410.

    The silences are bounded from the client's clock on the safe side: the kept session's gap
    is at most from one beat's send to the next beat's answer (asserted only when that stayed
    under T, so a stalled machine cannot fail it), the dropped one's at least from its
    creation's answer to the probe's send."""
    timeout = backend.limits.heartbeat_timeout_s
    if timeout is None:
        pytest.skip(undeclared(backend.name, "heartbeat_timeout_s"))
    silence = 1.5 * timeout + 5.0

    async def run() -> tuple[list[tuple[float, int]], float, int]:
        client = _low_level(backend)
        sent = time.monotonic()  # before the kept session's creation: gaps err long
        kept = await _create_session(backend, client)
        dropped = await _create_session(backend, client)
        quiet_since = time.monotonic()  # the dropped session's last answer
        beats: list[tuple[float, int]] = []  # (longest possible server-side gap, status)
        while time.monotonic() - quiet_since < silence:
            await asyncio.sleep(timeout / 4)
            before = time.monotonic()
            status = await _beat(client, kept)
            beats.append((time.monotonic() - sent, status))
            sent = before
            if status != 200:
                break
        while time.monotonic() - quiet_since < silence:  # a kept session that expired
            await asyncio.sleep(timeout / 4)
        probed = time.monotonic()
        return beats, probed - quiet_since, await _beat(client, dropped)

    beats, quiet, status = asyncio.run(run())
    for gap, answer in beats:
        if gap >= timeout:  # the machine stalled: the server may rightly have expired it
            break
        assert answer == 200, (
            f"a session whose heartbeats were at most {gap:.1f} s apart answered HTTP {answer} "
            f"(heartbeat timeout {timeout:g} s)"
        )
    assert status == 410, (
        f"a session without heartbeats for {quiet:.0f} s answered its next one with HTTP "
        f"{status}, not 410 (the declared heartbeat timeout is {timeout:g} s)"
    )
