"""The small differences from the hosted Tinker API, each through the unmodified ``tinker``
SDK: a wrong key is a 401, a training run's owner has the hosted form, a refusal while a
``forward_backward`` body is decoded frees its sequence number, ``seed=None`` is a random
seed, capabilities carry ``max_context_length``, and sessions are listed and read.
"""

from __future__ import annotations

import dataclasses
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from localsession.server.auth import Credential
from localsession.server.hosting import ServerThread

tinker = pytest.importorskip("tinker")
types = tinker.types

#: Seconds a missing sequence number holds later ops on the gap test's server: far past
#: WAIT_S, so an op queued behind an unreleased number cannot finish in time.
GAP_S = 600.0
#: How long an op that should run at once may take (a loaded machine included).
WAIT_S = 20.0
SECRET = "parity-secret"
#: The owner id documented in docs/tinker.md: tml:organization_user: + uuid5(URL, "localsession").
OWNER = "tml:organization_user:ad9d1e87-9807-58fe-9d96-4ed03c5ba6e2"


@pytest.fixture(scope="module")
def fake() -> Iterator[Any]:
    from localsession.mocking.hooks import scoped_environ
    from localsession.mocking.tinker_server import TinkerServer

    served = TinkerServer("fake", model_map={"acme/short": "localsession/tiny;max_context=4096"})
    # every session made from now on (the config is frozen: the service's is replaced; a
    # fake service wraps the runtime service, whose config the sessions read)
    runtime = served.service.runtime
    runtime.config = dataclasses.replace(runtime.config, gap_timeout=GAP_S)
    try:
        with scoped_environ(served.environment()):
            yield served
    finally:
        served.close()


def _datum(tokens: list[int] | None = None) -> Any:
    ids = tokens or [1, 2, 3]
    return types.Datum(
        model_input=types.ModelInput.from_ints(ids),
        loss_fn_inputs={"target_tokens": [t + 1 for t in ids]},
    )


# -- a wrong key is a 401 ----------------------------------------------------------------------


def test_a_wrong_tinker_key_is_a_401_authentication_error(fake: Any) -> None:
    openai = pytest.importorskip("openai")
    credential = Credential("AKIDPARITY", SECRET)
    with ServerThread(fake.service, credential=credential) as url:
        with pytest.raises(tinker.AuthenticationError) as refused:  # at its first request
            tinker.RestClient(base_url=url, api_key="tml-wrong").get_server_capabilities().result()
        assert refused.value.status_code == 401
        assert "TINKER_API_KEY=tml-<SECRET>" in str(refused.value)
        good = tinker.RestClient(base_url=url, api_key=f"tml-{SECRET}")
        assert good.get_server_capabilities().result().supported_models  # the right key passes
        for base, key in ((f"{url}/v1", "wrong"), (f"{url}/oai/api/v1", "tml-wrong")):
            client = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
            with pytest.raises(openai.AuthenticationError) as oai_refused:
                client.models.list()
            assert oai_refused.value.status_code == 401
            assert oai_refused.value.code == "invalid_api_key"
        ok = openai.OpenAI(base_url=f"{url}/oai/api/v1", api_key=f"tml-{SECRET}", max_retries=0)
        assert [m.id for m in ok.models.list()]  # the Tinker key as bearer passes


# -- the owner of a training run -----------------------------------------------------------------


def test_a_training_run_owner_has_the_hosted_form(fake: Any) -> None:
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4, seed=0).result()
    rest = tinker.RestClient(base_url=fake.url)
    run = rest.get_training_run(tc.model_id).result()
    assert run.model_owner == OWNER
    listed = rest.list_training_runs(limit=1000).result().training_runs
    assert {r.model_owner for r in listed} == {OWNER}


# -- a refusal while decoding frees its number ------------------------------------------------


def test_a_refusal_while_decoding_a_body_does_not_hold_up_the_next_op(fake: Any) -> None:
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4, seed=0).result()
    image = types.ModelInput(
        chunks=[types.ImageChunk(data=b"\x89PNG", format="png", expected_tokens=4)]
    )
    refused = tc.forward_backward(
        [types.Datum(model_input=image, loss_fn_inputs={"target_tokens": [1, 2, 3, 4]})],
        "cross_entropy",
    )
    with pytest.raises(Exception, match="image and audio inputs are not supported"):
        refused.result(timeout=WAIT_S)
    step = tc.forward_backward([_datum()], "cross_entropy").result(timeout=WAIT_S)
    assert len(step.loss_fn_outputs[0]["logprobs"].tolist()) == 3
    empty = types.Datum(model_input=types.ModelInput(chunks=[]), loss_fn_inputs={})
    with pytest.raises(Exception, match="has no model_input chunks"):
        tc.forward_backward([empty], "cross_entropy").result(timeout=WAIT_S)
    stepped = tc.optim_step(types.AdamParams(learning_rate=1e-3)).result(timeout=WAIT_S)
    assert "grad_norm" in stepped.metrics
    for session in fake.service.sessions():
        assert not any(session.waits_for_earlier(op_id) for op_id in list(session.ops))


def test_malformed_tensor_bytes_free_their_number(fake: Any) -> None:
    from tinker.proto import tinker_public_pb2 as pb

    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4, seed=0).result()
    # The SDK numbers this client's requests 1, 2, ...: number 1 goes as a raw body whose
    # target tensor holds 5 bytes (not whole int64s), then the SDK sends its own requests.
    msg = pb.ForwardBackwardRequest(model_id=tc.model_id, seq_id=1, loss_fn="cross_entropy")
    datum = msg.data.add()
    datum.model_input.add().encoded_text.tokens = b"\x01\x00\x00\x00"
    datum.loss_fn_inputs["target_tokens"].dtype = pb.DTYPE_INT64
    datum.loss_fn_inputs["target_tokens"].dense = b"\x01\x02\x03\x04\x05"
    request = urllib.request.Request(
        f"{fake.url}/api/v1/forward_backward",
        data=msg.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf", "X-API-Key": "tml-localsession"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=WAIT_S)
    assert refused.value.code == 400
    assert "not a whole number of q" in refused.value.read().decode()
    # The SDK's next request must be its second (seq_id 2): advance its request counter and
    # its turn counter past the first, which the raw body above used.
    tc._request_id_counter = tc._turn_counter = 1  # noqa: SLF001
    done = tc.forward_backward([_datum()], "cross_entropy").result(timeout=WAIT_S)
    assert done.loss_fn_outputs[0]["logprobs"].tolist()


# -- seed=None is a random seed -------------------------------------------------------------------


def _trained_logprobs(sc: Any, seed: int | None) -> list[float]:
    """Forward logprobs after one step: LoRA B starts at zero, so the seed (which draws A)
    shows only once B moved, and then in every logprob."""
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4, seed=seed).result()
    datum = _datum([72, 105, 33, 10])
    tc.forward_backward([datum], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    out = tc.forward([datum], "cross_entropy").result()
    return [float(x) for x in out.loss_fn_outputs[0]["logprobs"].tolist()]


@pytest.mark.localsession_tinker(engine="torch")
def test_seed_none_is_random_and_seed_zero_reproducible(localsession_tinker: Any) -> None:
    sc = tinker.ServiceClient()
    zero_a, zero_b = _trained_logprobs(sc, 0), _trained_logprobs(sc, 0)
    none_a, none_b = _trained_logprobs(sc, None), _trained_logprobs(sc, None)
    assert zero_a == zero_b  # bit-identical
    assert none_a != none_b
    assert none_a != zero_a and none_b != zero_a


# -- capabilities --------------------------------------------------------------------------------


def test_capabilities_report_the_enforced_context_length(fake: Any) -> None:
    caps = tinker.RestClient(base_url=fake.url).get_server_capabilities().result()
    limits = {m.model_name: m.max_context_length for m in caps.supported_models}
    assert limits["localsession/tiny"] == 131072  # the built-ins' max_position_embeddings
    assert limits["acme/short"] == 4096  # the map entry's max_context


# -- sessions -------------------------------------------------------------------------------------


def test_sessions_are_listed_newest_first_and_read_with_their_runs_and_samplers(
    fake: Any,
) -> None:
    first = tinker.ServiceClient(user_metadata={"team": "a"})
    run = first.create_lora_training_client(base_model="localsession/tiny", rank=4, seed=0)
    model_id = run.result().model_id
    sampler = first.create_sampling_client(base_model="localsession/tiny").result()
    second = tinker.ServiceClient()
    first_id = first.holder.get_session_id()
    second_id = second.holder.get_session_id()  # the session is made on first use
    rest = tinker.RestClient(base_url=fake.url)
    listed = rest.list_sessions(limit=1000).result().sessions
    assert listed.index(second_id) < listed.index(first_id)  # newest first
    page = rest.list_sessions(limit=1, offset=listed.index(first_id)).result().sessions
    assert page == [first_id]
    assert rest.list_sessions(limit=2, offset=len(listed)).result().sessions == []
    got = rest.get_session(first_id).result()
    assert got.training_run_ids == [model_id]
    assert got.sampler_ids == [sampler._sampling_session_id]  # noqa: SLF001
    assert got.user_metadata == {"team": "a"}
    assert rest.get_session(second_id).result().training_run_ids == []
    with pytest.raises(tinker.NotFoundError, match="unknown to this server"):
        rest.get_session("no-such-session").result()
