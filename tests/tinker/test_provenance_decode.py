"""Datum provenance as the forward_backward decoder reads it (server/tinker/provenance.py):
the protobuf body the SDK's own request converter writes, and the JSON forms."""

from __future__ import annotations

from typing import Any

import pytest

from localsession.port import ProvenanceSpan
from localsession.runtime.errors import ServiceError
from localsession.server.tinker import codec, provenance

tinker = pytest.importorskip("tinker")
types = tinker.types


def _sdk_body(datum: Any) -> bytes:
    """The protobuf bytes tinker 0.38 sends for a forward_backward of ``datum``."""
    from tinker.proto import request_conv

    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=[datum], loss_fn="stable_reinforce"),
        model_id="m",
        seq_id=1,
    )
    return bytes(request_conv.forward_backward_request_to_proto(request).SerializeToString())


def test_the_sdk_protobuf_body_carries_both_span_lists() -> None:
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([1, 2, 3, 4]),
        loss_fn_inputs={"target_tokens": [2, 3, 4, 5], "advantages": [0.0, 0.0, 1.0, 1.0]},
    ).with_provenance(
        model_input=[
            types.PromptProvenanceSpan(sequence_id="s-0", length=3),
            types.SampledProvenanceSpan(sequence_id="s-0", length=1),
        ],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id="s-0", offset=1, length=2),
            types.SampledProvenanceSpan(sequence_id="s-0", offset=0, length=2),
        ],
    )
    body = _sdk_body(datum)
    *_, datums, _ = codec.decode_forward_backward(body, "application/x-protobuf", None)
    (got,) = datums
    assert got.model_input_spans == (
        ProvenanceSpan("s-0", 0, 3, sampled=False),
        ProvenanceSpan("s-0", 0, 1, sampled=True),
    )
    assert got.loss_fn_input_spans == (
        ProvenanceSpan("s-0", 1, 2, sampled=False),
        ProvenanceSpan("s-0", 0, 2, sampled=True),
    )


def test_a_datum_without_provenance_has_none() -> None:
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": [2, 3], "weights": [1.0, 1.0]},
    )
    *_, datums, _ = codec.decode_forward_backward(_sdk_body(datum), "application/x-protobuf", None)
    assert datums[0].model_input_spans is None and datums[0].loss_fn_input_spans is None


def test_json_runs_in_both_forms() -> None:
    value = {
        "model_input_spans": [
            {"prompt_tokens": {"sequence_id": "a", "length": 2}},
            {"type": "sampled", "sequence_id": "a", "offset": 1, "length": 3},
        ],
        "loss_fn_input_spans": [{"sampled_tokens": {"sequence_id": "a", "length": 5}}],
    }
    model, loss = provenance.from_json(value, 0)
    assert model == (ProvenanceSpan("a", 0, 2, False), ProvenanceSpan("a", 1, 3, True))
    assert loss == (ProvenanceSpan("a", 0, 5, True),)


@pytest.mark.parametrize(
    "value, message",
    [
        ({"model_input_spans": []}, "comes as a pair"),
        (
            {
                "model_input_spans": [{"sequence_id": "", "length": 1}],
                "loss_fn_input_spans": [],
            },
            "needs a sequence_id",
        ),
        (
            {
                "model_input_spans": [{"sequence_id": "a", "length": -1}],
                "loss_fn_input_spans": [],
            },
            ">= 0",
        ),
    ],
)
def test_malformed_json_runs_are_refused_by_name(value: dict[str, Any], message: str) -> None:
    with pytest.raises(ServiceError, match=message):
        provenance.from_json(value, 3)
