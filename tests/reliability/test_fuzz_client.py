"""Fuzzed SDK types through the in-process clients: ``AdamParams``, ``SamplingParams``,
``Datum`` and ``TensorData`` values, each failing with the exception the real SDK raises for it.

The expectations come from the SDK's contract (docs/wire.md#5, #5, #10), not from
the code under test:

- pydantic's own field constraints fail at construction (``pydantic.ValidationError``);
- values under a modelled minimum fail in botocore before sending: ``ParamValidationError``
  at ``result()``;
- values over a service maximum (or not finite) are refused by the service: ``ClientError``
  with code ``ValidationException`` at ``result()``, naming the wire field;
- a datum whose loss inputs are missing or the wrong length is a ``ValueError`` at the call,
  naming the datum.

A session that saw all of that still trains exactly like one that saw none of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from botocore.exceptions import ClientError, ParamValidationError
from hypothesis import given
from hypothesis import strategies as st

from localsession import (
    AdamParams,
    Datum,
    ModelInput,
    SamplingParams,
    ServiceClient,
    TensorData,
    TrainingClient,
)
from localsession.runtime.service import ServiceConfig
from localsession.wiring import build_service

from .conftest import FUZZ_PROFILES, FUZZED, MODEL, PROFILES

ROLE = "arn:aws:iam::000000000000:role/fuzz"
TOKENS = [257, 104, 105, 33]
GOOD = Datum(
    model_input=ModelInput.from_ints(TOKENS),
    loss_fn_inputs={"target_tokens": TOKENS[1:] + [258], "weights": [1.0] * 4},
)
#: (SDK name, wire name, botocore minimum, service maximum)
ADAM = [
    ("learning_rate", "learningRate", 0.0, 0.01),
    ("beta1", "beta1", 0.0, 0.999999),
    ("beta2", "beta2", 0.0, 0.999999),
    ("eps", "eps", 1e-16, 0.01),
    ("weight_decay", "weightDecay", 0.0, 1.0),
    ("grad_clip_norm", "gradClipNorm", 0.0, 100.0),
    ("lora_plus_lr_ratio", "loraPlusLrRatio", 1.0, 100.0),
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceClient]:
    # In-process clients record a number refused client-side as lost at once (gap 0).
    home: Path = tmp_path_factory.mktemp("client-fuzz-home")
    service = build_service(ServiceConfig(home=home, gap_timeout=0.0, max_sessions=8))
    yield ServiceClient(role_arn=ROLE, backend=service)
    service.close()


def _any_float(lo: float, hi: float) -> st.SearchStrategy[float]:
    """Mostly in range, often just outside it, sometimes not finite."""
    return st.one_of(
        st.floats(lo, hi),
        st.floats(max_value=lo, exclude_max=True),
        st.floats(min_value=hi, exclude_min=True),
        st.sampled_from([lo, hi, 0.0, -0.0, math.nan, math.inf, -math.inf]),
    )


adam_values = st.fixed_dictionaries(
    {sdk: _any_float(lo, hi) for sdk, _, lo, hi in ADAM[:5]},
    optional={sdk: _any_float(lo, hi) for sdk, _, lo, hi in ADAM[5:]},
)


def _expected_adam(values: dict[str, float]) -> tuple[type[BaseException] | None, set[str]]:
    """What the SDK does with these AdamParams, and which wire fields may be named."""
    below = {wire for sdk, wire, lo, _ in ADAM if sdk in values and values[sdk] < lo}
    if below:
        return ParamValidationError, below
    bad = {
        wire
        for sdk, wire, lo, hi in ADAM
        if sdk in values and (not math.isfinite(values[sdk]) or values[sdk] > hi)
    }
    if values["learning_rate"] == 0:
        bad.add("learningRate")
    return (ClientError, bad) if bad else (None, set())


@pytest.mark.parametrize("profile", FUZZ_PROFILES)
def test_adam_params(client: ServiceClient, profile: str) -> None:
    tc: TrainingClient = client.create_lora_training_client(MODEL, rank=4, alpha=8)
    reference = client.create_lora_training_client(MODEL, rank=4, alpha=8)
    try:

        @PROFILES[profile]
        @given(adam_values)
        def run(values: dict[str, float]) -> None:
            FUZZED[profile] += 1
            error, fields = _expected_adam(values)
            future = tc.optim_step(AdamParams(**values))
            if error is None:
                future.result(timeout=60)
                return
            with pytest.raises(error) as raised:
                future.result(timeout=60)
            message = str(raised.value)
            if error is ClientError:
                response: Any = raised.value.response  # type: ignore[attr-defined]
                assert response["Error"]["Code"] == "ValidationException"
            assert any(f in message for f in fields), (values, message)

        run()
        # No refused step changed anything: after the same valid ops both sessions agree.
        # (Valid steps ran without gradients, which leaves an Adam state untouched.)
        for session in (tc, reference):
            session.forward_backward([GOOD]).result(timeout=60)
            session.optim_step(AdamParams(learning_rate=1e-2)).result(timeout=60)
        got = tc.forward([GOOD]).result(timeout=60).metrics["loss"]
        want = reference.forward([GOOD]).result(timeout=60).metrics["loss"]
        assert got == pytest.approx(want, rel=1e-6)
    finally:
        tc.stop()
        reference.stop()


sampling_values = st.fixed_dictionaries(
    {"max_tokens": st.one_of(st.integers(-10, 600), st.integers(131000, 200000))},
    optional={
        "temperature": _any_float(0.0, 2.0),
        "top_p": _any_float(0.0, 1.0),
        "top_k": st.integers(-5, 5),
    },
)


@pytest.mark.parametrize("profile", FUZZ_PROFILES)
def test_sampling_params(client: ServiceClient, profile: str) -> None:
    tc = client.create_lora_training_client(MODEL, rank=4, alpha=8)
    sampler = tc.create_sampling_client()
    prompt = ModelInput.from_ints(TOKENS)
    try:

        @PROFILES[profile]
        @given(sampling_values)
        def run(values: dict[str, Any]) -> None:
            FUZZED[profile] += 1
            temperature, top_p = values.get("temperature"), values.get("top_p")
            top_k, max_tokens = values.get("top_k"), values["max_tokens"]
            if (temperature is not None and not temperature >= 0) or (
                top_p is not None and not 0 <= top_p <= 1
            ):
                with pytest.raises(pydantic.ValidationError):
                    SamplingParams(**values)
                return
            params = SamplingParams(**values)
            fields = set()
            if max_tokens > 131072:
                fields.add("maxTokens")
            if temperature is not None and (temperature > 2 or not math.isfinite(temperature)):
                fields.add("temperature")
            if top_k is not None and top_k < 1 and top_k != -1:
                fields.add("topK")
            if max_tokens >= 512 and not fields:
                return  # valid: generating 512 tokens per example is not the point here
            future = sampler.sample(prompt, num_samples=1, sampling_params=params)
            if max_tokens < 512:
                with pytest.raises(ParamValidationError) as raised:
                    future.result(timeout=60)
                assert "maxTokens" in str(raised.value)
                return
            with pytest.raises(ClientError) as refused:
                future.result(timeout=60)
            assert refused.value.response["Error"]["Code"] == "ValidationException"
            assert any(f in str(refused.value) for f in fields), (values, str(refused.value))

        run()
    finally:
        tc.stop()


@st.composite
def broken_datums(draw: st.DrawFn) -> tuple[Datum, str]:
    """A datum with a missing or wrong-length loss input; the key the error must name."""
    tokens = draw(st.lists(st.integers(0, 255), min_size=1, max_size=8))
    n = len(tokens)
    inputs: dict[str, Any] = {
        "target_tokens": TensorData(data=tokens, dtype="int64"),
        "weights": TensorData(data=[1.0] * n),
    }
    key = draw(st.sampled_from(["target_tokens", "weights"]))
    if draw(st.booleans()):
        del inputs[key]
    else:
        wrong = draw(st.integers(0, 12).filter(lambda m: m != n))
        inputs[key] = (
            TensorData(data=[1] * wrong, dtype="int64")
            if key == "target_tokens"
            else [0.5] * wrong  # a raw list, serialised by the SDK
        )
    return Datum(model_input=ModelInput.from_ints(tokens), loss_fn_inputs=inputs), key


@pytest.mark.parametrize("profile", FUZZ_PROFILES)
def test_broken_datums_fail_at_the_call(client: ServiceClient, profile: str) -> None:
    tc = client.create_lora_training_client(MODEL, rank=4, alpha=8)
    try:
        baseline = tc.forward([GOOD]).result(timeout=60).metrics["loss"]

        @PROFILES[profile]
        @given(broken_datums(), st.integers(0, 2))
        def run(broken: tuple[Datum, str], position: int) -> None:
            FUZZED[profile] += 1
            datum, key = broken
            batch = [GOOD] * position + [datum]
            with pytest.raises(ValueError) as raised:
                tc.forward_backward(batch, "cross_entropy")
            assert f"datum[{position}]" in str(raised.value) and key in str(raised.value)

        run()
        # Nothing was sent: the next op is number 2 and the weights are where they were.
        assert tc.forward([GOOD]).result(timeout=60).metrics["loss"] == baseline
        assert tc.current_sequence_number == 2
    finally:
        tc.stop()
