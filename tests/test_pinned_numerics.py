"""Numerics pinned across refactors: a fixed-seed run through both dialects equals the values
recorded before issue 55 item 1 (typed commands all the way down) was built.

One loopback service (``mocking.tinker_server.TinkerServer``, the real torch engine on
``localsession/tiny``, one torch thread, MKL's linear kernels and no packed decode products,
so no run-to-run choice can move a bit) is driven twice: by the SageMaker-shaped in-process
client and by the unmodified ``tinker`` SDK over HTTP. Each run does forward_backward
(cross-entropy, then a clipped PPO), AdamW steps, a forward, save_state / load_state into a
second session, a forward there, and seeded samples from saved weights. Every value the
clients got back (but the wall-clock ones) must equal the fixture exactly: float32 on CPU in
the same kind of process gives the same bits.

How the fixture was made: ``LOCALSESSION_RECORD_PINNED=1 pytest tests/test_pinned_numerics.py``
on main at ef103e6 (before the change), which writes ``fixtures/pinned_numerics.json`` and
skips. Re-record only for a change that is meant to move numerics, and say so in the commit.
Re-recorded once, for the static decode step becoming the default (issue 56): 8 sample
logprobs moved by 1-2 ulp (at most 3e-7), every token and every training value stayed
equal, and with ``LOCALSESSION_DECODE=dynamic`` the old recording still matched bit for bit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localsession import AdamParams, Datum, ModelInput, ServiceClient, TensorData

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parent / "fixtures" / "pinned_numerics.json"
MODEL = "localsession/tiny"
ROLE = "arn:aws:iam::000000000000:role/pinned"
#: Metrics measured on the wall clock or probed from the host (engine/flops.py): they differ
#: between any two runs (Tinker's names carry a ``:sum`` / ``:mean`` suffix).
WALL_CLOCK = frozenset({"mfu", "promised_flops"})
TOKENS = [1, 72, 101, 108, 108, 111, 44, 32]
RL_TOKENS = [1, 5, 9, 13, 17]
ADVANTAGES = [0.5, -1.0, 2.0, 0.0, 1.5]
OLD_LOGPROBS = [-2.0, -3.0, -1.5, -4.0, -2.5]
CLIP = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}
PROMPT = [1, 72, 101]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from localsession.mocking.hooks import scoped_environ
    from localsession.mocking.tinker_server import TinkerServer

    pinned = {
        "LOCALSESSION_THREADS": "1",
        "LOCALSESSION_LINEAR": "mkl",
        "LOCALSESSION_PACKED_CACHE_MB": "0",  # packing is probed per host (packed_linear.py)
    }
    with scoped_environ(pinned):  # read once, as the service is built (wiring)
        built = TinkerServer("torch", home=tmp_path_factory.mktemp("pinned"))
    try:
        with scoped_environ(built.environment()):
            yield built
    finally:
        built.close()


def _untimed(metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        key: float(value) for key, value in metrics.items() if key.split(":")[0] not in WALL_CLOCK
    }


def _outputs(outputs: list[dict[str, Any]]) -> list[dict[str, list[float]]]:
    """Each datum's output tensors as plain float lists (both clients' tensor types)."""
    out = []
    for row in outputs:
        out.append({key: [float(v) for v in _values(value)] for key, value in row.items()})
    return out


def _values(value: Any) -> list[Any]:
    if hasattr(value, "tolist"):
        listed = value.tolist()
        return listed if isinstance(listed, list) else [listed]
    data = value.get("data") if isinstance(value, dict) else getattr(value, "data", value)
    return list(data) if isinstance(data, (list, tuple)) else [data]


def _sagemaker_run(service: Any) -> dict[str, Any]:
    client = ServiceClient("us-west-2", role_arn=ROLE, backend=service, strict=False)

    def datum(tokens: list[int], **extra: list[float]) -> Datum:
        inputs = {
            "target_tokens": TensorData(data=tokens[1:] + [0], dtype="int64"),
            "weights": TensorData(data=[1.0] * (len(tokens) - 1) + [0.0]),
            **{key: TensorData(data=values) for key, values in extra.items()},
        }
        return Datum(model_input=ModelInput.from_ints(tokens), loss_fn_inputs=inputs)

    sft = [datum(TOKENS)]
    rl = [datum(RL_TOKENS, advantages=ADVANTAGES, logprobs=OLD_LOGPROBS)]
    out: dict[str, Any] = {"steps": []}
    tc = client.create_lora_training_client(MODEL, rank=4, alpha=8)
    for _ in range(2):
        ce = tc.forward_backward(sft).result(timeout=300)
        ppo = tc.forward_backward(rl, loss_fn="ppo", loss_fn_config=CLIP).result(timeout=300)
        step = tc.optim_step(AdamParams(learning_rate=1e-2)).result(timeout=300)
        out["steps"].append(
            {
                "ce": [_untimed(ce.metrics), _outputs(ce.loss_fn_outputs)],
                "ppo": [_untimed(ppo.metrics), _outputs(ppo.loss_fn_outputs)],
                "optim": _untimed(step.metrics),
            }
        )
    after = tc.forward(sft).result(timeout=300)
    out["forward"] = [_untimed(after.metrics), _outputs(after.loss_fn_outputs)]
    arn = tc.save_state().result(timeout=300).model_package_arn
    sampler = tc.save_weights_and_get_sampling_client()
    params = {"max_tokens": 6, "temperature": 1.0, "seed": 11}
    sampled = sampler.sample(ModelInput.from_ints(PROMPT), 2, params).result(timeout=300)
    out["samples"] = [[s.tokens, [float(v) for v in s.logprobs]] for s in sampled.sequences]
    tc.stop()
    resumed = client.create_lora_training_client(MODEL, rank=4, alpha=8)
    resumed.load_state_with_optimizer(arn).result(timeout=300)
    loaded = resumed.forward(sft).result(timeout=300)
    out["loaded_forward"] = [_untimed(loaded.metrics), _outputs(loaded.loss_fn_outputs)]
    step = resumed.optim_step(AdamParams(learning_rate=1e-2)).result(timeout=300)
    out["loaded_optim"] = _untimed(step.metrics)
    resumed.stop()
    return out


def _ready(client: Any) -> Any:
    """The client a tinker SDK call made (its future's result, where it returns one)."""
    return client.result() if hasattr(client, "result") else client


def _tinker_run() -> dict[str, Any]:
    tinker = pytest.importorskip("tinker")
    types = tinker.types

    def datum(tokens: list[int], **extra: list[float]) -> Any:
        inputs: dict[str, Any] = {
            "target_tokens": tokens[1:],
            "weights": [1.0] * (len(tokens) - 1),
            **extra,
        }
        return types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs
        )

    sft = [datum(TOKENS)]
    rl = [datum(RL_TOKENS, advantages=ADVANTAGES[:4], logprobs=OLD_LOGPROBS[:4])]
    sc = tinker.ServiceClient()
    out: dict[str, Any] = {"steps": []}
    tc = _ready(sc.create_lora_training_client(base_model=MODEL, rank=4, seed=0))
    for _ in range(2):
        ce = tc.forward_backward(sft, "cross_entropy").result()
        ppo = tc.forward_backward(rl, "ppo", loss_fn_config=CLIP).result()
        step = tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        out["steps"].append(
            {
                "ce": [_untimed(ce.metrics), _outputs(ce.loss_fn_outputs)],
                "ppo": [_untimed(ppo.metrics), _outputs(ppo.loss_fn_outputs)],
                "optim": _untimed(step.metrics or {}),
            }
        )
    after = tc.forward(sft, "cross_entropy").result()
    out["forward"] = [_untimed(after.metrics), _outputs(after.loss_fn_outputs)]
    path = tc.save_state("pinned").result().path
    sampler = _ready(tc.save_weights_and_get_sampling_client())
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=11)
    sampled = sampler.sample(types.ModelInput.from_ints(PROMPT), 2, params).result()
    out["samples"] = [[list(s.tokens), [float(v) for v in s.logprobs]] for s in sampled.sequences]
    resumed = _ready(sc.create_training_client_from_state_with_optimizer(path))
    loaded = resumed.forward(sft, "cross_entropy").result()
    out["loaded_forward"] = [_untimed(loaded.metrics), _outputs(loaded.loss_fn_outputs)]
    step = resumed.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    out["loaded_optim"] = _untimed(step.metrics or {})
    return out


def _recorded(dialect: str, values: dict[str, Any]) -> dict[str, Any]:
    """The fixture's values for ``dialect`` (or, when recording, write these and skip)."""
    plain = json.loads(json.dumps(values))  # as the fixture holds them: tuples as lists
    if os.environ.get("LOCALSESSION_RECORD_PINNED") == "1":
        recorded = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
        recorded[dialect] = plain
        FIXTURE.parent.mkdir(exist_ok=True)
        FIXTURE.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"recorded {dialect} into {FIXTURE.name}")
    return dict(json.loads(FIXTURE.read_text())[dialect])


def _first_difference(got: Any, want: Any, where: str = "") -> str | None:
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got)):
            found = _first_difference(got.get(key), want.get(key), f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = _first_difference(g, w, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if got == want else f"{where}: got {got!r}, recorded {want!r}"


def test_sagemaker_dialect_numerics_equal_the_recorded_run(server: Any) -> None:
    got = json.loads(json.dumps(_sagemaker_run(server.service)))
    want = _recorded("sagemaker", got)
    assert got["steps"][0]["ce"][0]["loss"] > got["forward"][0]["loss"]  # it trained
    assert _first_difference(got, want) is None, _first_difference(got, want)


def test_tinker_dialect_numerics_equal_the_recorded_run(server: Any) -> None:
    got = json.loads(json.dumps(_tinker_run()))
    want = _recorded("tinker", got)
    assert got["steps"][0]["ce"][0]["loss:sum"] > got["forward"][0]["loss:sum"]  # it trained
    assert _first_difference(got, want) is None, _first_difference(got, want)


def test_the_comparison_catches_one_changed_bit() -> None:
    """The comparison is exact: the recorded values with one float's last bit moved differ."""
    want = json.loads(FIXTURE.read_text())["sagemaker"]
    moved = json.loads(json.dumps(want))
    value = moved["forward"][1][0]["logprobs"][0]
    import struct

    bits = struct.unpack("<q", struct.pack("<d", value))[0]
    moved["forward"][1][0]["logprobs"][0] = struct.unpack("<d", struct.pack("<q", bits + 1))[0]
    assert _first_difference(moved, want) is not None
    assert _first_difference(want, want) is None
