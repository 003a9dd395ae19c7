"""The SageMaker dialect's result shapes: typed results (``port_results``) as wire dicts.

The one place the SageMaker wire's result keys are written (docs/wire.md#4): an
operation's ``operationResult`` member, as ``Get*OperationResult`` returns it to the
in-process clients, the HTTP server and ``mock()``. Engines return typed values and the
Tinker dialect serialises the same values its own way (``server/tinker/results.py``).

- ``forward`` / ``forwardBackward``: ``{"metrics", "lossFnOutputs": [{"logprobs",
  "elementwise_loss", <diagnostic>...}]}``, each a float32 ``TensorData``;
- ``optimizerStep``: ``{"metrics"}``; ``saveState`` / ``saveWeights``:
  ``{"modelPackageArn"}``; ``loadState`` / ``loadWeightsForSampling``: ``{}``;
- ``sample``: ``{"sequences": [{"stopReason", "tokens", "logprobs", "tokenUsage",
  "topkLogprobs"?}], "promptLogprobs"?, "topkPromptLogprobs"?: [[{"tokenId", "logprob"}]],
  "targetPromptLogprobs"?, "promptAltTokens"?: {"tokens", "logprobs"}}``;
- ``computeLogprobs``: ``{"logprobs"}``.
"""

from __future__ import annotations

from typing import Any

from localsession.port_results import (
    DatumOutput,
    ForwardResult,
    LoadResult,
    LogprobsResult,
    OpResult,
    OptimResult,
    SampledSequence,
    SampleResult,
    SaveResult,
    TopLogprob,
)


def tensor_data(values: list[float]) -> dict[str, Any]:
    """A flat float32 ``TensorData`` in wire form."""
    return {"data": values, "dtype": "float32", "shape": [len(values)]}


def _datum_output(out: DatumOutput) -> dict[str, Any]:
    body = {
        "logprobs": tensor_data(out.logprobs),
        "elementwise_loss": tensor_data(out.elementwise_loss),
    }
    for key, value in out.extra.items():
        body[key] = tensor_data([value])
    return body


def _sequence(seq: SampledSequence, prompt_tokens: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "stopReason": seq.stop_reason,
        "tokens": seq.tokens,
        "logprobs": seq.logprobs,
        "tokenUsage": {"prefill": prompt_tokens, "decode": len(seq.tokens)},
    }
    if seq.topk_logprobs is not None:
        out["topkLogprobs"] = [_top(row) for row in seq.topk_logprobs]
    return out


def _top(row: list[TopLogprob]) -> list[dict[str, Any]]:
    return [{"tokenId": c.token_id, "logprob": c.logprob} for c in row]


def result_body(result: OpResult) -> dict[str, Any]:
    """An operation's typed result as its SageMaker ``operationResult`` member."""
    if isinstance(result, ForwardResult):
        return {
            "metrics": result.metrics,
            "lossFnOutputs": [_datum_output(out) for out in result.outputs],
        }
    if isinstance(result, OptimResult):
        return {"metrics": result.metrics}
    if isinstance(result, SampleResult):
        body: dict[str, Any] = {
            "sequences": [_sequence(s, result.prompt_tokens) for s in result.sequences]
        }
        if result.prompt_logprobs is not None:
            body["promptLogprobs"] = result.prompt_logprobs
        if result.topk_prompt_logprobs is not None:
            body["topkPromptLogprobs"] = [_top(row) for row in result.topk_prompt_logprobs]
        if result.target_prompt_logprobs is not None:
            body["targetPromptLogprobs"] = result.target_prompt_logprobs
        if (alt := result.prompt_alt_tokens) is not None:
            body["promptAltTokens"] = {"tokens": alt.tokens, "logprobs": alt.logprobs}
        return body
    if isinstance(result, LogprobsResult):
        return {"logprobs": result.logprobs}
    if isinstance(result, SaveResult):
        return {"modelPackageArn": result.package_arn}
    if isinstance(result, LoadResult):
        return {}
    raise TypeError(f"no SageMaker wire shape for {type(result).__name__}")
