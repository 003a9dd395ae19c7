"""The SageMaker dialect's words: typed results, token counts and refusals as its wire says them.

The one place the SageMaker wire's result keys are written (docs/wire.md#4): an
operation's ``Get*OperationResult`` body and its ``operationResult`` member, as the
in-process clients, the HTTP server and ``mock()`` read them; a session's token counts
(``BillableTokenUsage``); and a refused command's fact (``commands.Refusal``) in the wire's
field names (:func:`refusal`). The runtime's queue, ``run_op`` and the engines hold typed
values only; the Tinker dialect serialises the same values its own way
(``server/tinker/results.py``).

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

from localsession import vocab
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
from localsession.runtime.commands import Fact, Refusal, words


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


def operation_body(
    status: str, kind: str, wire: dict[str, Any] | None, error: str | None, result: Any
) -> dict[str, Any]:
    """A ``Get*OperationResult`` body: ``status``, the ``wire`` result (``result_body``) of
    a completed op under its ``kind``, a failed or skipped op's ``errorDetails``, and a
    completed forward's ``tokenUsage``."""
    body: dict[str, Any] = {"status": status}
    if wire is not None:
        body["operationResult"] = {kind: wire}
    if status in (vocab.OpStatus.FAILED, vocab.OpStatus.SKIPPED) and error:
        body["errorDetails"] = error
    if status == vocab.OpStatus.COMPLETED and isinstance(result, ForwardResult):
        body["tokenUsage"] = {"trainingTokens": result.token_count}
    return body


#: ``BillableTokenUsage``'s members, in the order of the counts ``usage_body`` takes.
USAGE_KEYS = ("PrefillTokenCount", "SampleTokenCount", "TrainingTokenCount")


def usage_body(prefill: int, sampled: int, training: int) -> dict[str, int]:
    """A session's token counts as ``BillableTokenUsage`` (and its on-disk record)."""
    return dict(zip(USAGE_KEYS, (prefill, sampled, training), strict=True))


def usage_counts(body: dict[str, Any]) -> tuple[int, int, int]:
    """(prefill, sampled, training) of a ``usage_body`` (a key left out counts 0)."""
    prefill, sampled, training = (int(body.get(key) or 0) for key in USAGE_KEYS)
    return prefill, sampled, training


#: The AdamW field names of the port (``AdamHyperparams``) -> the wire's.
_ADAM_WIRE = {port: wire for wire, port in vocab.ADAM_WIRE_KEYS.items()}
#: The sampling fields of the port -> the wire's, with the ceiling the wire's words name.
_SAMPLING_WIRE = {"temperature": ("temperature", 2.0), "top_p": ("topP", 1.0)}


def refusal(fact: Refusal, kind: str) -> str:
    """A refused command's fact in the wire's field names (``kind``: the op it was sent as)."""
    value = fact.value
    match fact.fact:
        case Fact.LORA_RANK:
            return f"LoraConfig.Rank={value!r} must be an integer in [{fact.low}, {fact.high}]"
        case Fact.LORA_ALPHA:
            return f"LoraConfig.Alpha={value!r} must be an integer >= 1"
        case Fact.BASE_MODEL:
            return "ModelConfig.BaseModelArn is required"
        case Fact.LOSS_FN:
            return f"{kind}.lossFnName {value!r} is not one of {', '.join(vocab.LOSS_FUNCTIONS)}"
        case Fact.LOSS_BOUND:
            bounds = f"[{fact.low}, {fact.high}]"
            return f"{kind}.lossFnConfig.{fact.field}={value!r} must be a number in {bounds}"
        case Fact.NO_DATUMS:
            return f"{kind}.datumList must hold at least one datum"
        case Fact.ADAM_RANGE:
            return (
                f"optimizerStep.adamParamsConfig.{_ADAM_WIRE[fact.field]}={value} is outside "
                f"the service range [{fact.low}, {fact.high}]; use a value in range, or run "
                "relaxed (strict=False / --relaxed)"
            )
        case Fact.ADAM_RATE:
            return "optimizerStep.adamParamsConfig.learningRate must be greater than 0"
        case Fact.DESCRIPTION:
            return (
                f"{kind}.description must be a string of Unicode text (no lone surrogates) "
                f"of at most {fact.high:g} characters"
            )
        case Fact.PROMPT:
            return f"{kind}.prompt must hold at least one token id (ints >= 0)"
        case Fact.NUM_SAMPLES:
            return f"sample.numSamples={value!r} must be an integer in [1, 1000]"
        case Fact.MAX_TOKENS:
            return "sample.samplingParams.maxTokens must be a positive integer"
        case Fact.MAX_TOKENS_STRICT:
            return (
                f"sample.samplingParams.maxTokens={value} is outside the service range "
                f"[{fact.low:g}, {fact.high:g}]; run relaxed (strict=False / --relaxed) for "
                "shorter generations"
            )
        case Fact.NOT_NEGATIVE | Fact.TOO_HIGH:
            wire, ceiling = _SAMPLING_WIRE[fact.field]
            return f"sample.samplingParams.{wire}={value!r} must be in [0, {ceiling}]"
        case Fact.TOP_K:
            if isinstance(value, bool) or not isinstance(value, int):
                return "sample.samplingParams.topK must be an integer"
            return "sample.samplingParams.topK must be >= 1, or -1 to disable it"
        case Fact.STOP:
            return (
                "sample.samplingParams.stop must be a list of non-empty strings of Unicode "
                "text (no lone surrogates)"
            )
        case Fact.TOPK_PROMPT:
            return "sample.topkPromptLogprobs must be an integer >= 0"
        case Fact.SEED:
            return "sample.samplingParams.seed must be an integer"
    # DATUM_TOKENS, DATUM_INPUT: the wire's datums are parsed whole (wire_datums.py), so
    # a command made of them never breaks these; said in the port's names if one did.
    return words(fact)
