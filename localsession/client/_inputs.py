"""From what a user passes to what goes on the wire: batches, prompts, chunks, combined results.

* ``batch_to_datum_list`` accepts the SDK's five batch forms (token-ID lists, strings, wire
  datum dicts, typed ``Datum``/``ModelInput`` objects or look-alikes, and one bare token list)
  and a mix of them, tokenizes text, attaches batch-wide ``loss_fn_inputs`` where a datum has
  none, and checks before sending what the service would only fail later: the loss inputs a
  loss needs, and per-token inputs as long as the datum.
* ``prompt_to_model_input`` does the same for one sampling prompt.
* ``chunk_datum_list`` splits a batch at 1024 datums or about 10 MB, and
  ``combine_forward_backward_results`` folds the chunk results back into one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from localsession import vocab
from localsession.types import (
    Datum,
    EncodedTextChunk,
    ForwardBackwardOutput,
    ModelInput,
    ModelInputChunk,
    _loss_inputs_to_api,
)

_log = logging.getLogger("localsession.client")

#: Completes the warning for an accepted but unused ``retry_config``.
_RETRY_CONFIG_CONSEQUENCE: str = (
    "the built-in retry policy applies instead (a fixed budget of retries on throttling and "
    "5xx errors; other errors surface at once)"
)


def _warn_unsupported_args(consequence: str, **passed: Any) -> None:
    """Warn once per argument the caller set (not ``None``) that this API accepts and ignores."""
    template = "%s=%r is not supported by this SDK and has no effect; %s."
    for name in (key for key, value in passed.items() if value is not None):
        _log.warning(template, name, passed[name], consequence)


_TYPED = (Datum, ModelInput, EncodedTextChunk, ModelInputChunk)


def _tokenizer_of(tokenizer: Any, tokenizer_loader: Callable[[], Any] | None) -> Any:
    """The given tokenizer, else the loader's (loaded only now that text needs it)."""
    if tokenizer is None and tokenizer_loader is None:
        problem = (
            "String input requires a tokenizer, but none is available for this session's base "
            "model. Provide pre-tokenized token IDs instead."
        )
        raise ValueError(problem)
    return tokenizer if tokenizer is not None else tokenizer_loader()  # type: ignore[misc]


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) for t in value)


def _text_chunks(token_ids: Any, chunk_type: str = "encoded_text") -> dict[str, Any]:
    one = {"tokens": token_ids, "type": chunk_type}
    return {"chunks": [one]}


def prompt_to_model_input(
    prompt: Any,
    tokenizer: Any = None,
    chunk_type: str = "encoded_text",
    tokenizer_loader: Any = None,
) -> dict[str, Any]:
    """The wire ``ModelInput`` (``{"chunks": [...]}``) for one sampling prompt: token IDs,
    text, a wire dict (passed through), or a typed input or look-alike."""
    if isinstance(prompt, _TYPED[1:]) or _looks_like_input(prompt):
        typed = ModelInput.from_any(prompt)
        if typed._pending_text is not None:
            typed = typed._tokenized_with(_tokenizer_of(tokenizer, tokenizer_loader))
        wire: dict[str, Any] = typed._to_api()
        return wire
    if isinstance(prompt, dict) and "chunks" in prompt:  # already wire-shaped
        passed: dict[str, Any] = prompt  # already a wire input
        return passed
    if _is_token_list(prompt):
        return _text_chunks(prompt, chunk_type)
    if not isinstance(prompt, str):
        problem = (
            f"Unsupported prompt type: {type(prompt).__name__}. Expected a list of token IDs, a "
            "string, or a ModelInput dict."
        )
        raise TypeError(problem)
    encoder = _tokenizer_of(tokenizer, tokenizer_loader)
    return _text_chunks(encoder.encode(prompt), chunk_type)


def _looks_like_input(prompt: Any) -> bool:
    """A foreign object with ``chunks`` (not a dict, list or text)."""
    return not isinstance(prompt, (dict, list, str)) and hasattr(prompt, "chunks")


def tokenize_to_datum(
    token_ids: list[int],
    loss_fn_inputs: dict[str, Any] | None = None,
    chunk_type: str = "encoded_text",
) -> dict[str, Any]:
    """One wire datum of ``token_ids``; ``lossFnInputs`` only when inputs are given."""
    wire: dict[str, Any] = {"modelInput": _text_chunks(token_ids, chunk_type)}
    if loss_fn_inputs is None:
        return wire
    return {**wire, "lossFnInputs": _loss_inputs_to_api(loss_fn_inputs)}


def _duck_typed(element: Any) -> bool:
    """A foreign object that looks like a ``Datum`` or a ``ModelInput``."""
    plain = isinstance(element, (dict, list, str, int))
    return not plain and (hasattr(element, "model_input") or hasattr(element, "chunks"))


def _kind(element: Any) -> str:
    """Which reading a batch element calls for (mixed kinds are read one by one)."""
    if isinstance(element, _TYPED) or _duck_typed(element):
        return "typed"  # read through Datum.from_any
    if isinstance(element, (dict, str)):
        return type(element).__name__
    return "tokens" if _is_token_list(element) else "unsupported"


class _Reader:
    """Turns batch elements into wire datums, sharing one lazily loaded tokenizer."""

    def __init__(self, tokenizer: Any, loader: Any, loss_fn_inputs: dict[str, Any] | None):
        self.tokenizer, self.loader, self.shared = tokenizer, loader, loss_fn_inputs

    def encode(self, text: str) -> Any:
        if self.tokenizer is None:
            self.tokenizer = _tokenizer_of(None, self.loader)
        return self.tokenizer.encode(text)

    def text(self, text: str) -> dict[str, Any]:
        return tokenize_to_datum(self.encode(text), self.shared)

    def typed(self, element: Any) -> dict[str, Any]:
        read = Datum.from_any(element)
        if read._pending_text is not None:
            read = read._tokenized_with(_tokenizer_of(self.tokenizer, self.loader))
        wire: dict[str, Any] = read._to_api()
        return wire

    def fill(self, datums: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Give the batch-wide loss inputs to each datum that carries none of its own."""
        if not self.shared:
            return datums  # nothing to share
        wire = _loss_inputs_to_api(self.shared)
        return [d if "lossFnInputs" in d else {**d, "lossFnInputs": {**wire}} for d in datums]

    def each(self, batch: Any) -> list[dict[str, Any]]:
        """Element by element, each given the shared inputs as it is read (the SDK's order:
        a shared input it cannot convert raises at the first datum that takes it)."""
        return [self._one(element) for element in batch]

    def _one(self, element: Any) -> dict[str, Any]:
        read = self.text(element) if isinstance(element, str) else self.typed(element)
        if self.shared and "lossFnInputs" not in read:  # converted only where it is taken
            read = {**read, "lossFnInputs": _loss_inputs_to_api(self.shared)}
        return read


def _coerce(batch: Any, reader: _Reader) -> list[dict[str, Any]]:
    if not batch:  # nothing to coerce
        return []
    head = batch[0]
    if isinstance(head, int):
        strays = sorted({type(e).__name__ for e in batch if not isinstance(e, int)})
        if strays:
            problem = (
                "Unsupported batch: one starting with a token ID must hold only token IDs, but "
                f"this one also holds {strays}. Pass a list of token ID lists, a list of "
                "strings, or a list of datum dicts."
            )
            raise TypeError(problem)
        return [tokenize_to_datum(batch, reader.shared)]
    # elements of one type are of one kind, except lists (token IDs or not)
    one_type = len(set(map(type, batch))) == 1 and not isinstance(head, list)
    if not one_type and len({_kind(e) for e in batch}) > 1:
        return reader.each(batch)
    if isinstance(head, (Datum, ModelInput)) or _duck_typed(head):
        return reader.fill([reader.typed(e) for e in batch])
    if isinstance(head, dict):
        if all("modelInput" in d for d in batch):
            return reader.fill(batch) if reader.shared else batch
        if any("model_input" in d or "prompt" in d for d in batch):
            return reader.each(batch)
    elif isinstance(head, str):
        return [reader.text(text) for text in batch]
    elif _is_token_list(head):
        return [tokenize_to_datum(ids, reader.shared) for ids in batch]
    problem = (
        f"Unsupported batch type: {type(head).__name__}. Expected list of token ID lists, list "
        "of strings, or list of datum dicts."
    )
    raise TypeError(problem)


# Loss inputs the service requires to be exactly as long as the datum's tokens.
_PER_TOKEN = ("target_tokens", "weights", "logprobs", "old_logprobs")


def model_input_token_count(model_input: Any) -> int | None:
    """Tokens in a wire ``{"chunks": [...]}`` input; ``None`` for any other shape."""
    parts = model_input.get("chunks") if isinstance(model_input, dict) else None
    if not isinstance(parts, list):
        return None
    count = 0
    for part in parts:
        ids = part.get("tokens") if isinstance(part, dict) else None
        if not isinstance(ids, list):
            return None
        count += len(ids)
    return count


def _check_datums(datums: list[Any], loss: str | None) -> None:
    """Every datum carries the loss inputs ``loss`` needs (when named); then, datum by datum,
    per-token inputs have one value per token of the input (the SDK's order of the checks)."""
    needed = vocab.REQUIRED_INPUT_KEYS.get(loss, ()) if loss is not None else ()
    every = frozenset(needed)
    inputs = [d.get("lossFnInputs") if isinstance(d, dict) else None for d in datums]
    for i, given in enumerate(inputs if needed else ()):
        if not isinstance(datums[i], dict):
            continue
        if not (isinstance(given, dict) and given.keys() >= every):
            _refuse_missing(i, str(loss), needed, given if isinstance(given, dict) else {})
    for i, given in enumerate(inputs):
        if not (isinstance(given, dict) and given):
            continue
        tokens = model_input_token_count(datums[i].get("modelInput"))
        if tokens is None:  # not a countable input
            continue  # not a countable input: nothing to compare against
        for key in _PER_TOKEN:
            value = given.get(key)
            values = value.get("data") if isinstance(value, dict) else value
            if isinstance(values, list) and len(values) != tokens:
                problem = (
                    f"datum[{i}]: lossFnInputs[{key!r}] has {len(values)} values but modelInput "
                    f"has {tokens} tokens. Per-token loss inputs span the whole input, prompt "
                    f"included: for a {tokens}-token datum, weights=[0.0] * prompt_len + "
                    "[1.0] * response_len. Passing values for the response only is the usual "
                    "cause."
                )
                raise ValueError(problem)


def _refuse_missing(i: int, loss: str, needed: tuple[str, ...], given: dict[str, Any]) -> None:
    lacking = [k for k in needed if k not in given]
    verb = "is" if len(lacking) == 1 else "are"
    problem = (
        f"datum[{i}]: loss function {loss!r} requires {', '.join(needed)} in its loss "
        f"inputs, and {', '.join(lacking)} {verb} missing. Pass them per datum, or for "
        "the whole batch with loss_fn_inputs={...}; each is one value per token of the "
        "datum, the prompt included."
    )
    raise ValueError(problem)


def batch_to_datum_list(
    batch: Any,
    tokenizer: Any = None,
    loss_fn_inputs: dict[str, Any] | None = None,
    tokenizer_loader: Any = None,
    loss_fn_name: str | None = None,
) -> list[dict[str, Any]]:
    """The wire datums of a batch, checked.

    ``loss_fn_inputs`` goes to every datum that has none of its own. With ``loss_fn_name``,
    every datum must carry the inputs that loss needs (``ValueError`` naming the datum and
    keys); per-token inputs must always match the datum's length.
    """
    wire = _coerce(batch, _Reader(tokenizer, tokenizer_loader, loss_fn_inputs))
    _check_datums(wire, loss_fn_name)  # the keys are known only for a named loss
    return wire


# -- splitting a large forward_backward and folding it back ------------------------------------

#: At most this many datums per request.
MAX_CHUNK_LEN: int = 1024
#: At most about this many serialized bytes per request (headroom under the request limit).
MAX_CHUNK_BYTES: int = 10_000_000
#: Metrics that count something in the batch: chunk values add up instead of averaging.
SUMMED_METRICS: frozenset[str] = frozenset({vocab.Metric.GLOBAL_TOKEN_NUM})
#: Gradient norms: a property of the gradient after the last chunk, which alone counts.
LAST_CHUNK_METRICS: frozenset[str] = frozenset(
    {vocab.Metric.GRAD_NORM, vocab.Metric.ACTOR_GRAD_NORM}
)


def _approx_bytes(datum: dict[str, Any]) -> int:
    """About 10 bytes per token and per loss-input value (digits, separators)."""
    count = 0
    for part in datum.get("modelInput", {}).get("chunks", []):
        count += len(part.get("tokens", []))
    for value in (datum.get("lossFnInputs") or {}).values():
        values = value.get("data") if isinstance(value, dict) else None
        count += len(values) if isinstance(values, list) else 0
    return 10 * count


def chunk_datum_list(
    datum_list: list[dict[str, Any]],
    *,
    max_len: int = MAX_CHUNK_LEN,
    max_bytes: int = MAX_CHUNK_BYTES,
) -> list[list[dict[str, Any]]]:
    """Consecutive runs of at most ``max_len`` datums and ``max_bytes`` (one oversized datum
    travels alone), in order."""
    runs: list[list[dict[str, Any]]] = []
    size = 0
    for item in datum_list:
        weight = _approx_bytes(item)
        if not runs or len(runs[-1]) >= max_len or (runs[-1] and size + weight > max_bytes):
            runs.append([])
            size = 0
        runs[-1].append(item)
        size += weight
    return runs


def _fold_metric(key: str, seen: list[tuple[Any, int]], last: dict[str, Any]) -> Any:
    """One whole-batch metric from the chunks that reported it, as (value, datums) pairs.

    A gradient norm is a property of the gradient accumulated after the last chunk, so only
    that chunk's counts; counts add up; other numbers are datum-weighted means.
    """
    values = [v for v, _ in seen]
    if not all(isinstance(v, (int, float)) for v in values):
        return values[-1]
    if key in LAST_CHUNK_METRICS:
        return last.get(key, _MISSING)
    if key in SUMMED_METRICS:
        return sum(values)
    return sum(v * n for v, n in seen) / sum(n for _, n in seen)


_MISSING: Any = object()


def combine_forward_backward_results(
    results: list[Any], datum_counts: list[int] | None = None
) -> Any:
    """One ``ForwardBackwardOutput`` from the results of a batch's chunks, in order.

    ``datum_counts`` (datums per chunk) weighs the means; without it each chunk weighs as many
    per-datum outputs as it returned (at least 1). Per-datum outputs are concatenated.
    """
    if len(results) == 1:  # an unsplit batch: its own result
        return results[-1]
    if datum_counts is None or len(datum_counts) != len(results):
        datum_counts = [len(r.loss_fn_outputs or []) for r in results]
    sizes = [max(1, n) for n in datum_counts]
    tables = [r.metrics for r in results]
    folded: dict[str, Any] = {}
    for key in dict.fromkeys(k for table in tables for k in table):
        seen = [(t[key], n) for t, n in zip(tables, sizes, strict=True) if key in t]
        value = _fold_metric(key, seen, tables[-1])
        if value is not _MISSING:
            folded[key] = value
    section: dict[str, Any] = {"metrics": folded}
    outputs = [entry for r in results for entry in (r.loss_fn_outputs or [])]
    if outputs:
        section["lossFnOutputs"] = outputs
    return ForwardBackwardOutput._from_api({vocab.OpKind.FORWARD_BACKWARD.value: section})
