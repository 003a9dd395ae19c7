"""TrainingClient through the public API: ordering, failure isolation, limits, lifecycle."""

from __future__ import annotations

import asyncio
import math

import pytest
from botocore.exceptions import ClientError, ParamValidationError

from localsession import (
    AdamParams,
    Datum,
    ModelInput,
    OperationError,
    ServiceClient,
    TensorData,
    TrainingSessionError,
)
from localsession.runtime.service import Service, ServiceConfig
from localsession.wiring import build_service

MODEL = "localsession/tiny"


def datum(tokens: list[int], **extra: list[float]) -> Datum:
    inputs = {
        "target_tokens": TensorData(data=tokens[1:] + [0], dtype="int64"),
        "weights": TensorData(data=[1.0] * len(tokens)),
        **{k: TensorData(data=v) for k, v in extra.items()},
    }
    return Datum(model_input=ModelInput.from_ints(tokens), loss_fn_inputs=inputs)


BATCH = [datum([1, 72, 101, 108, 108, 111]), datum([1, 87, 111, 114, 108, 100, 33])]


def test_pipelined_ops_resolve_in_sequence_order(client: ServiceClient, service: Service) -> None:
    with client.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        futures = []
        for _ in range(3):
            futures.append(tc.forward_backward(BATCH))
            futures.append(tc.optim_step(AdamParams(learning_rate=1e-3)))
        assert tc.current_sequence_number == 6
        results = [f.result(timeout=60) for f in futures]
        ops = [service.session(tc.training_session_name).ops[f.operation_id] for f in futures]
        assert [op.seq for op in ops] == [1, 2, 3, 4, 5, 6]
        finished = [op.finished_at for op in ops]
        assert finished == sorted(finished)
        starts = [op.started_at for op in ops]
        assert all(s is not None and e is not None for s, e in zip(starts, finished, strict=True))
        assert all(finished[i] <= starts[i + 1] for i in range(5))  # one at a time
        # Each step trains the same batch, so the loss falls step over step.
        losses = [r.metrics["loss"] for r in results[::2]]
        assert losses[2] < losses[0]
        assert results[0].metrics["global_token_num"] == 13


def test_failed_op_fails_alone_and_changes_nothing(client: ServiceClient) -> None:
    """A bad op fails its own future, names datum and key, adds no gradient; later ops run."""
    ppo_good = [datum([1, 72, 101, 108], advantages=[0.5] * 4, logprobs=[-5.5] * 4)]
    # `advantages` is not length-checked client-side (docs/wire.md#5): the runtime catches it.
    bad = ppo_good + [datum([1, 72, 101], advantages=[1.0] * 5, logprobs=[-1.0] * 3)]

    def run(with_failure: bool) -> float:
        with client.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
            failed = tc.forward_backward(bad, loss_fn="ppo") if with_failure else None
            fb = tc.forward_backward(ppo_good, loss_fn="ppo")
            step = tc.optim_step(AdamParams(learning_rate=1e-2))
            after = tc.forward(ppo_good, loss_fn="ppo")
            if failed is not None:
                with pytest.raises(OperationError) as info:
                    failed.result(timeout=60)
                message = str(info.value)
                assert message.startswith(f"training operation {failed.operation_id} failed:")
                assert "datum 1" in message and "advantages" in message
                assert isinstance(failed.exception(), OperationError)
                assert failed.done()
            assert math.isfinite(fb.result(timeout=60).metrics["loss"])
            assert step.result(timeout=60).metrics["learning_rate"] == pytest.approx(1e-2)
            return after.result(timeout=60).metrics["loss"]

    assert run(with_failure=True) == run(with_failure=False)


def test_client_side_validation_raises_at_the_call_site(client: ServiceClient) -> None:
    with client.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        short = Datum(
            model_input=ModelInput.from_ints([1, 2, 3]),
            loss_fn_inputs={"target_tokens": [2, 3], "weights": [1.0, 1.0, 1.0]},
        )
        with pytest.raises(ValueError, match=r"datum\[0\].*target_tokens.*2 values.*3 tokens"):
            tc.forward_backward([short])
        with pytest.raises(ValueError):
            tc.forward_backward(BATCH, loss_fn="not_a_loss")


def test_service_limits_are_strict_by_default(
    client: ServiceClient, relaxed: ServiceClient
) -> None:
    with client.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        too_fast = tc.optim_step(AdamParams(learning_rate=0.05))
        with pytest.raises(ClientError) as info:
            too_fast.result(timeout=60)
        assert info.value.response["Error"]["Code"] == "ValidationException"
        assert "learningRate" in info.value.response["Error"]["Message"]
        negative = tc.optim_step({"learning_rate": -1.0})
        with pytest.raises(ParamValidationError):
            negative.result(timeout=60)
        # Both numbers were consumed; later ops still run.
        assert tc.optim_step().result(timeout=60).metrics is not None
    with relaxed.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        assert tc.optim_step(AdamParams(learning_rate=0.05)).result(timeout=60).metrics


def test_futures_surface(client: ServiceClient) -> None:
    with client.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        fut = tc.forward(BATCH)
        assert not fut.cancel() and not fut.cancelled()
        assert isinstance(fut.operation_id, str) and len(fut.operation_id) == 36

        async def both() -> tuple[float, float]:
            a = await fut
            b = await (await tc.forward_async(BATCH)).result_async(timeout=60)
            return a.metrics["loss"], b.metrics["loss"]

        first, second = asyncio.run(both())
        assert first == second and fut.done()
        outputs = fut.result().loss_fn_outputs
        assert outputs is not None and len(outputs) == 2
        assert len(outputs[1]["logprobs"]["data"]) == 7


def test_stop_closes_the_client_and_is_idempotent(client: ServiceClient) -> None:
    tc = client.create_lora_training_client(MODEL, rank=4, alpha=8)
    name = tc.training_session_name
    assert name.startswith("sagemaker-training-session-")
    tc.stop()
    with pytest.raises(TrainingSessionError, match="client is closed"):
        tc.forward(BATCH)
    client.stop_session(name)  # already stopped: quiet, as with the SDK
    [summary] = client.list_sessions(name_contains=name)
    assert summary.status.value == "Stopped" and summary.training_session_name == name
    client.delete_session(name)
    assert client.list_sessions(name_contains=name) == []
    with pytest.raises(ClientError) as info:
        client.stop_session(name)
    assert info.value.response["Error"]["Code"] == "ResourceNotFound"


def test_queued_ops_are_skipped_when_the_session_stops(client: ServiceClient) -> None:
    tc = client.create_lora_training_client(MODEL, rank=4, alpha=8)
    futures = [tc.forward_backward(BATCH * 8) for _ in range(6)]
    tc.stop()
    outcomes = [f.exception(timeout=60) for f in futures]
    skipped = [e for e in outcomes if e is not None]
    assert skipped, "stopping at once should leave some ops queued"
    assert all("stopped before this operation ran" in str(e) for e in skipped)
    assert all(e is None for e in outcomes[: outcomes.index(skipped[0])])


def test_max_sessions_is_enforced() -> None:
    service = build_service(ServiceConfig(max_sessions=1))
    try:
        svc = ServiceClient(role_arn="arn:aws:iam::000000000000:role/x", backend=service)
        with svc.create_lora_training_client(MODEL, rank=4, alpha=8):
            with pytest.raises(ClientError) as info:
                svc.create_lora_training_client(MODEL, rank=4, alpha=8)
            assert info.value.response["Error"]["Code"] == "ResourceLimitExceeded"
        # Stopping frees the slot.
        svc.create_lora_training_client(MODEL, rank=4, alpha=8).stop()
    finally:
        service.close()


def test_unknown_model_lists_models_and_how_to_map(client: ServiceClient) -> None:
    with pytest.raises(ValueError) as info:
        client.create_lora_training_client("acme/does-not-exist")
    message = str(info.value)
    assert "localsession/tiny" in message and "LOCALSESSION_MODEL_MAP" in message


def test_mapped_name_runs_unchanged(client: ServiceClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "openai/gpt-oss-20b=localsession/tiny")
    assert "openai/gpt-oss-20b" in client.list_base_models()
    with client.create_lora_training_client("openai/gpt-oss-20b", rank=4, alpha=8) as tc:
        assert tc.get_tokenizer().vocab_size >= 256
        assert tc.forward(BATCH).result(timeout=60).metrics["loss"] > 0


def test_throttled_and_5xx_submits_are_retried_as_the_sdk_does(
    client: ServiceClient, service: Service
) -> None:
    """The SDK resends a ThrottlingException/5xx-refused submit with the same sequence number
    (docs/wire.md#6); a 4xx refusal is not retried and surfaces at result()."""
    with client.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        service.faults.throttle_next(2)
        first = tc.forward_backward(BATCH).result(timeout=60)
        service.faults.fail_next("optimizerStep", at="submit", code="InternalServerException")
        tc.optim_step(AdamParams(learning_rate=1e-3)).result(timeout=60)
        assert service.faults.pending()["throttle"] == 0 and not service.faults.armed
        service.faults.fail_next("forwardBackward", at="submit", code="ConflictException")
        with pytest.raises(ClientError) as refused:
            tc.forward_backward(BATCH).result(timeout=60)
        assert refused.value.response["Error"]["Code"] == "ConflictException"
        # The retried ops ran once each: the step changed the loss of the same batch.
        second = tc.forward(BATCH).result(timeout=60)
        assert second.metrics["loss"] != first.metrics["loss"]
