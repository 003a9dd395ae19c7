"""The JSON forms of ``ForwardBackwardOutput`` and ``SampleResponse``, for a tinker SDK that
does not ask for protobuf (no ``Accept: application/x-protobuf``: tinker 0.16 reads a
result only as JSON). Built from the same typed results as codec.py's protobuf bodies, in
the field names of the SDK's pydantic types (``loss_fn_outputs`` of ``TensorData``,
``sequences``, ``prompt_logprobs``, ``topk_prompt_logprobs``). The options newer SDKs
added (sampled-token top-k, target and alternative prompt logprobs) have no field there
and are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from localsession.port_results import DatumOutput, SampleResult


def _tensor(values: list[float], width: int) -> dict[str, Any]:
    """A float32 ``TensorData``: ``(N, width)`` row-major when ``width``, else ``(N,)``."""
    data = [float(v) for v in values]
    shape = [len(data) // width, width] if width else [len(data)]
    return {"data": data, "dtype": "float32", "shape": shape}


def forward_backward_output(
    metrics: dict[str, float], outputs: Sequence[DatumOutput], width: int = 0
) -> dict[str, Any]:
    """A forward/forwardBackward result: per datum its ``logprobs`` and
    ``elementwise_loss`` (codec.encode_forward_backward_output's fields)."""
    records = [
        {
            "logprobs": _tensor(out.logprobs, width),
            "elementwise_loss": _tensor(out.elementwise_loss, width),
        }
        for out in outputs
    ]
    return {"loss_fn_output_type": "ArrayRecord", "loss_fn_outputs": records, "metrics": metrics}


def sample_response(
    result: SampleResult, topk: int, prompt_last_n: int | None = None
) -> dict[str, Any]:
    """A ``sample`` result. Prompt logprobs the SDK reads as None (the first, which has no
    context, and any before the last ``prompt_last_n`` when that is set) are null."""
    out: dict[str, Any] = {  # no "type": the SDK's SampleResponse defaults it
        "sequences": [
            {"tokens": list(s.tokens), "logprobs": list(s.logprobs), "stop_reason": s.stop_reason}
            for s in result.sequences
        ],
    }
    prompt = result.prompt_logprobs
    if prompt is not None:
        cut = len(prompt) - int(prompt_last_n) if prompt_last_n else 0
        out["prompt_logprobs"] = [
            None if i == 0 or i < cut else float(v) for i, v in enumerate(prompt)
        ]
    rows = result.topk_prompt_logprobs
    if rows is not None and topk > 0:
        out["topk_prompt_logprobs"] = [
            [(int(c.token_id), float(c.logprob)) for c in row[:topk]] if i > 0 and row else None
            for i, row in enumerate(rows)
        ]
    return out
