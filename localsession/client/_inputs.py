# Copyright Amazon.com, Inc. or its affiliates. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License"). You
# may not use this file except in compliance with the License. A copy of
# the License is located at
#
#     http://aws.amazon.com/apache2.0/
#
# or in the "license" file accompanying this file. This file is
# distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF
# ANY KIND, either express or implied. See the License for the specific
# language governing permissions and limitations under the License.
"""Batch and prompt coercion, local validation, chunking and chunk combination.

Vendored from sagemaker-train 1.27.0 (`training_session/_utils.py`, the client-side input
half) under the Apache License 2.0, so localsession coerces and rejects inputs exactly as the
SDK does, with the same exception types and messages. Only import paths were changed.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from localsession.types import (
    Datum,
    EncodedTextChunk,
    ModelInput,
    ModelInputChunk,
    _serialize_loss_fn_inputs,
)

logger = logging.getLogger(__name__)

#: Consequence clause for ``retry_config``, shared by every factory returning a
#: SamplingClient. The retry policy is the SDK's: throttling and 5xx failures are
#: retried on a fixed budget on both submit and poll, and any other error
#: surfaces immediately.
_RETRY_CONFIG_CONSEQUENCE = (
    "the SDK's built-in transient-retry policy applies instead (fixed budget on "
    "throttling and 5xx; other errors surface immediately)"
)


def _warn_unsupported_args(consequence: str, **passed: Any) -> None:
    """Log a warning for each accepted-but-unhonoured keyword argument.

    These parameters are accepted but carry no behaviour. The warning names each
    one the caller actually set, so the log says plainly which knobs the run did
    not use.

    Only a value the caller chose warns. ``None``, or for a boolean the default
    the SDK already behaves as, carries no request and stays quiet, so the
    message keeps its signal.

    Args:
        consequence: Clause completing "... and has no effect; <consequence>",
            naming what happened instead (e.g. ``"the session was created
            without it"``).
        **passed: Parameter name to value. Values of ``None`` are skipped.
    """
    for name, value in passed.items():
        if value is None:
            continue
        logger.warning(
            "%s=%r is not supported by this SDK and has no effect; %s.",
            name,
            value,
            consequence,
        )





def _resolve_tokenizer(tokenizer: Any, tokenizer_loader: Any):
    """Return a tokenizer, lazily loading one via ``tokenizer_loader`` if needed.

    ``tokenizer`` (already cached) wins; otherwise the zero-arg
    ``tokenizer_loader`` (e.g. ``client.get_tokenizer``) is invoked on demand,
    so string input works without a manual ``get_tokenizer()`` call.
    Raises ValueError if neither yields a tokenizer.
    """
    if tokenizer is not None:
        return tokenizer
    if tokenizer_loader is not None:
        return tokenizer_loader()
    raise ValueError(
        "String input requires a tokenizer, but none is available for this "
        "session's base model. Provide pre-tokenized token IDs instead."
    )


def prompt_to_model_input(
    prompt: Any,
    tokenizer: Any = None,
    chunk_type: str = "encoded_text",
    tokenizer_loader: Any = None,
) -> dict[str, Any]:
    """Build a ModelInput shape from a sampling prompt.

    Accepts the same prompt forms as a single training datum:
      - A list of token IDs: ``[1, 2, 3]``
      - A string (tokenized via ``tokenizer`` or lazily via ``tokenizer_loader``)
      - A pre-built ModelInput dict (passthrough): ``{"chunks": [...]}``
      - A typed :class:`ModelInput` / :class:`EncodedTextChunk`, or any
        object with ``chunks``

    Returns the ``{"chunks": [...]}`` ModelInput shape expected by the sampling
    operation.
    """
    # Typed inputs: built-in types or compatible external objects. A typed
    # input built from text (ModelInput.from_text) carries the text rather than
    # chunks, so it is tokenized here too: this is the one place with a
    # tokenizer, and serializing it untokenized raises.
    if isinstance(prompt, (ModelInput, EncodedTextChunk, ModelInputChunk)):
        model_input = ModelInput.from_any(prompt)
        if model_input._pending_text is not None:
            model_input = model_input._tokenized_with(
                _resolve_tokenizer(tokenizer, tokenizer_loader)
            )
        return model_input._to_api()
    if not isinstance(prompt, (dict, list, str)) and hasattr(prompt, "chunks"):
        return ModelInput.from_any(prompt)._to_api()

    # Already a ModelInput dict
    if isinstance(prompt, dict) and "chunks" in prompt:
        return prompt

    # String: tokenize (lazily loading a tokenizer only when needed)
    if isinstance(prompt, str):
        token_ids = _resolve_tokenizer(tokenizer, tokenizer_loader).encode(prompt)
    # List of token IDs
    elif isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        token_ids = prompt
    else:
        raise TypeError(
            f"Unsupported prompt type: {type(prompt).__name__}. "
            "Expected a list of token IDs, a string, or a ModelInput dict."
        )

    return {"chunks": [{"tokens": token_ids, "type": chunk_type}]}


def tokenize_to_datum(
    token_ids: list[int],
    loss_fn_inputs: dict[str, Any] | None = None,
    chunk_type: str = "encoded_text",
) -> dict[str, Any]:
    """Build a single Datum shape from token IDs.

    ``lossFnInputs`` is only included when ``loss_fn_inputs`` is provided.
    The service rejects an auto-generated ``labels`` entry. The accepted keys
    depend on the loss function (e.g. ``advantages``, ``weights``,
    ``target_tokens``, ``logprobs``, ``ref_log_prob``), so the caller supplies
    the inputs appropriate for their loss function.
    """
    datum: dict[str, Any] = {
        "modelInput": {"chunks": [{"tokens": token_ids, "type": chunk_type}]},
    }
    if loss_fn_inputs is not None:
        datum["lossFnInputs"] = _serialize_loss_fn_inputs(loss_fn_inputs)
    return datum


def _batch_element_kind(element: Any) -> str:
    """Classify one batch element, for detecting a batch that mixes kinds.

    Only the distinction between the interpretations :func:`batch_to_datum_list`
    applies matters here, so an unrecognised element gets its own kind and lands
    in the mixed path, where coercing it raises a clear error.
    """
    if isinstance(element, (Datum, ModelInput, EncodedTextChunk, ModelInputChunk)):
        return "typed"
    if isinstance(element, dict):
        return "dict"
    if isinstance(element, str):
        return "text"
    if isinstance(element, list) and all(isinstance(t, int) for t in element):
        return "tokens"
    if not isinstance(element, (dict, list, str, int)) and (
        hasattr(element, "model_input") or hasattr(element, "chunks")
    ):
        return "typed"
    return "unsupported"


def _typed_datum_to_api(
    element: Any,
    tokenizer: Any,
    tokenizer_loader: Any,
) -> dict[str, Any]:
    """Serialize one typed batch element, tokenizing text it still carries.

    A ``Datum`` or ``ModelInput`` built from text (``ModelInput.from_text``, or a
    caller's own object exposing a text prompt) has no chunks to send yet. The
    tokenizer lives out here, so this is where that text becomes tokens;
    otherwise serializing it raises.
    """
    datum = Datum.from_any(element)
    if datum._pending_text is not None:
        datum = datum._tokenized_with(_resolve_tokenizer(tokenizer, tokenizer_loader))
    return datum._to_api()


def _mixed_batch_to_datum_list(
    batch: Any,
    tokenizer: Any,
    loss_fn_inputs: dict[str, Any] | None,
    tokenizer_loader: Any,
) -> list[dict[str, Any]]:
    """Coerce a batch whose elements are not all the same kind, one at a time.

    Text is the one kind needing outside context (a tokenizer), so it keeps the
    dedicated path; everything else goes through :meth:`Datum.from_any`, which
    rejects an element it cannot read instead of emitting an empty datum.
    """
    tok = None
    datums: list[dict[str, Any]] = []
    for element in batch:
        if isinstance(element, str):
            if tok is None:
                tok = _resolve_tokenizer(tokenizer, tokenizer_loader)
            datums.append(tokenize_to_datum(tok.encode(element), loss_fn_inputs))
            continue
        datum = _typed_datum_to_api(element, tokenizer, tokenizer_loader)
        if loss_fn_inputs and "lossFnInputs" not in datum:
            datum = {**datum, "lossFnInputs": dict(_serialize_loss_fn_inputs(loss_fn_inputs))}
        datums.append(datum)
    return datums


#: ``lossFnInputs`` entries whose length the service requires to equal the token
#: count of ``modelInput``. Limited to what the service enforces: other entries
#: may legitimately carry their own length.
_PER_TOKEN_LOSS_FN_INPUTS = (
    "target_tokens",
    "weights",
    "logprobs",
    "old_logprobs",
)


def model_input_token_count(model_input: Any) -> int | None:
    """Token count of a serialized ``modelInput``, or ``None`` if not countable.

    ``None`` for anything that is not the ``{"chunks": [...]}`` shape, so a
    length check is skipped rather than guessed at.
    """
    if not isinstance(model_input, dict):
        return None
    chunks = model_input.get("chunks")
    if not isinstance(chunks, list):
        return None
    total = 0
    for chunk in chunks:
        if not isinstance(chunk, dict):
            return None
        tokens = chunk.get("tokens")
        if not isinstance(tokens, list):
            return None
        total += len(tokens)
    return total


def _wire_model_input_length(datum: dict[str, Any]) -> int | None:
    """Token count of a datum's serialized ``modelInput``."""
    return model_input_token_count(datum.get("modelInput"))


def _wire_value_length(value: Any) -> int | None:
    """Element count of a serialized ``lossFnInputs`` value, or ``None``."""
    if isinstance(value, dict):
        data = value.get("data")
        return len(data) if isinstance(data, list) else None
    if isinstance(value, list):
        return len(value)
    return None


#: The loss inputs each loss function requires on every datum. The field is
#: optional in general, but which entries a given loss needs is not: a request
#: missing one is refused, and the refusal names neither the datum nor the key.
_LOSS_FN_INPUT_KEYS = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "weights", "logprobs", "advantages"),
    "ppo": ("target_tokens", "weights", "logprobs", "advantages"),
    "cispo": ("target_tokens", "weights", "logprobs", "advantages"),
}


def _validate_loss_fn_inputs(datums: list[dict[str, Any]], loss_fn_name: str) -> None:
    """Check every datum carries the loss inputs ``loss_fn_name`` requires.

    Raised here rather than left to the request so the message can name the datum
    and the keys. An operation that reaches the service without them is refused
    after it has been accepted and queued, and that refusal identifies neither.
    """
    required = _LOSS_FN_INPUT_KEYS.get(loss_fn_name)
    if not required:
        return
    for index, datum in enumerate(datums):
        if not isinstance(datum, dict):
            continue
        loss_fn_inputs = datum.get("lossFnInputs")
        present = loss_fn_inputs if isinstance(loss_fn_inputs, dict) else {}
        missing = [key for key in required if key not in present]
        if not missing:
            continue
        raise ValueError(
            f"datum[{index}]: loss function {loss_fn_name!r} requires "
            f"{', '.join(required)} in its loss inputs, and "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing. "
            f"Pass them per datum, or for the whole batch with "
            f"loss_fn_inputs={{...}}; each is one value per token of the datum, "
            f"the prompt included."
        )


def _validate_datum_lengths(datums: list[dict[str, Any]]) -> None:
    """Check per-token ``lossFnInputs`` against the datum's token count.

    Every per-token entry must be as long as ``modelInput``, prompt positions
    included. Raised locally because the service accepts the mismatch and only
    fails the operation later.
    """
    for index, datum in enumerate(datums):
        if not isinstance(datum, dict):
            continue
        loss_fn_inputs = datum.get("lossFnInputs")
        if not isinstance(loss_fn_inputs, dict) or not loss_fn_inputs:
            continue
        expected = _wire_model_input_length(datum)
        if expected is None:
            continue
        for key in _PER_TOKEN_LOSS_FN_INPUTS:
            if key not in loss_fn_inputs:
                continue
            actual = _wire_value_length(loss_fn_inputs[key])
            if actual is None or actual == expected:
                continue
            raise ValueError(
                f"datum[{index}]: lossFnInputs[{key!r}] has {actual} values but "
                f"modelInput has {expected} tokens. Every per-token entry must "
                f"be the same length as modelInput, covering the prompt as well "
                f"as the response, e.g. weights=[0.0] * prompt_len + [1.0] * "
                f"response_len for a {expected}-token input. Response-only "
                f"values are the usual cause of this mismatch."
            )


def batch_to_datum_list(
    batch: Any,
    tokenizer: Any = None,
    loss_fn_inputs: dict[str, Any] | None = None,
    tokenizer_loader: Any = None,
    loss_fn_name: str | None = None,
) -> list[dict[str, Any]]:
    """Convert a user-provided batch to a list of Datum dicts.

    Accepts:
      - A list of token ID lists: ``[[1,2,3], [4,5,6]]``
      - A list of strings (tokenized via ``tokenizer`` or lazily via
        ``tokenizer_loader``): ``["hello", "world"]``
      - A list of pre-built datum dicts (passthrough)
      - A list of typed :class:`Datum` / :class:`ModelInput` objects, or
        compatible objects with the same attributes

    When ``loss_fn_inputs`` is provided, it is attached to every constructed
    datum. For pre-built datum dicts it fills in only those that do not already
    carry their own. When omitted, no ``lossFnInputs`` is emitted (the service
    rejects an auto-generated ``labels`` entry).

    Args:
        loss_fn_name: The loss function the batch will be sent with. Given, every
            datum is checked for the keys that loss needs. Omitted, only the
            lengths are checked.

    Raises:
        ValueError: A datum is missing a loss input ``loss_fn_name`` needs, or a
            per-token ``lossFnInputs`` entry is not the same length as the
            datum's ``modelInput``.
    """
    datums = _coerce_batch_to_datum_list(batch, tokenizer, loss_fn_inputs, tokenizer_loader)
    if loss_fn_name is not None:
        _validate_loss_fn_inputs(datums, loss_fn_name)
    _validate_datum_lengths(datums)
    return datums


def _coerce_batch_to_datum_list(
    batch: Any,
    tokenizer: Any = None,
    loss_fn_inputs: dict[str, Any] | None = None,
    tokenizer_loader: Any = None,
) -> list[dict[str, Any]]:
    """Coerce a batch to wire-shape datum dicts, per :func:`batch_to_datum_list`."""
    if not batch:
        return []

    first = batch[0]

    # A batch of bare token IDs is one datum, not a list of elements.
    if isinstance(first, int):
        # That reading holds only if every element is a token ID. A batch that
        # merely starts with one was read as a token list regardless, which put
        # the remaining elements inside a token array and sent them.
        others = sorted({type(e).__name__ for e in batch if not isinstance(e, int)})
        if others:
            raise TypeError(
                "Unsupported batch: one starting with a token ID must hold only "
                f"token IDs, but this one also holds {others}. Pass a list of token "
                "ID lists, a list of strings, or a list of datum dicts."
            )
    else:
        kinds = {_batch_element_kind(element) for element in batch}
        if len(kinds) > 1:
            # Mixed kinds: the homogeneous branches below read the whole batch
            # through the interpretation chosen for ``first``, which would apply
            # the wrong one to every other element. Coerce element by element
            # instead so each is read as what it actually is.
            return _mixed_batch_to_datum_list(batch, tokenizer, loss_fn_inputs, tokenizer_loader)

    # Typed Datum / ModelInput objects: built-in or compatible external objects.
    if isinstance(first, (Datum, ModelInput)) or (
        not isinstance(first, (dict, list, str, int))
        and (hasattr(first, "model_input") or hasattr(first, "chunks"))
    ):
        datums = [_typed_datum_to_api(d, tokenizer, tokenizer_loader) for d in batch]
        if not loss_fn_inputs:
            return datums
        serialized = _serialize_loss_fn_inputs(loss_fn_inputs)
        return [
            d if "lossFnInputs" in d else {**d, "lossFnInputs": dict(serialized)} for d in datums
        ]

    # Already a datum dict: fill loss inputs only where absent. Copy rather
    # than mutate the caller's dicts, and give each datum its own
    # loss_fn_inputs so a later edit to one does not bleed into the others.
    if isinstance(first, dict) and all(isinstance(d, dict) and "modelInput" in d for d in batch):
        if not loss_fn_inputs:
            return batch
        serialized = _serialize_loss_fn_inputs(loss_fn_inputs)
        return [
            d if "lossFnInputs" in d else {**d, "lossFnInputs": dict(serialized)} for d in batch
        ]

    # A datum dict spelled with ``model_input`` or ``prompt`` is read one
    # element at a time, the same way a mixed batch is. A dict naming no input
    # at all falls through to the error below, which lists what a batch may
    # hold; coercing it would instead build a datum with no input at all.
    if all(isinstance(d, dict) for d in batch) and any(
        "model_input" in d or "prompt" in d for d in batch
    ):
        return _mixed_batch_to_datum_list(batch, tokenizer, loss_fn_inputs, tokenizer_loader)

    # List of token ID lists
    if isinstance(first, list) and all(isinstance(t, int) for t in first):
        return [tokenize_to_datum(ids, loss_fn_inputs) for ids in batch]

    # List of strings: tokenize (lazily loading a tokenizer only when needed)
    if isinstance(first, str):
        tok = _resolve_tokenizer(tokenizer, tokenizer_loader)
        return [tokenize_to_datum(tok.encode(text), loss_fn_inputs) for text in batch]

    # Single token ID list (not wrapped)
    if isinstance(first, int):
        return [tokenize_to_datum(batch, loss_fn_inputs)]

    raise TypeError(
        f"Unsupported batch type: {type(first).__name__}. "
        "Expected list of token ID lists, list of strings, or list of datum dicts."
    )


# --- forward-backward chunking ----------------------------------------------
#
# A batch too large for one request is split into chunks and submitted as
# consecutive forwardBackward ops. Gradients accumulate until the next
# optim_step, so this is equivalent to sending the whole batch at once. Each
# chunk is capped by datum count and by an estimated byte budget.

#: Max datums per forward-backward chunk.
MAX_CHUNK_LEN = 1024
#: Metrics that count what a batch held rather than describe it per datum. A
#: chunked batch splits the count, so the whole-batch value is the total and
#: not an average. Named explicitly: an unrecognized metric is treated as a
#: per-datum quantity, which is the common case but still an assumption.
SUMMED_METRICS = frozenset({"global_token_num"})

#: Approximate serialized-byte budget per chunk (leaves headroom under the
#: runtime request-size limit for envelope + signing overhead).
MAX_CHUNK_BYTES = 10_000_000


def _estimate_datum_bytes(datum: Dict[str, Any]) -> int:
    """Roughly estimate a datum's serialized size in bytes.

    Counts the token payload (the dominant term: token IDs plus per-token
    loss-function inputs such as advantages/weights/logprobs) and adds a small
    fixed per-token allowance for JSON structure. Deliberately an estimate:
    it only needs to be monotonic in the real size to keep chunks under the
    limit, not exact.
    """
    tokens = 0
    for chunk in datum.get("modelInput", {}).get("chunks", []):
        tokens += len(chunk.get("tokens", []))
    lfi = datum.get("lossFnInputs") or {}
    for value in lfi.values():
        if isinstance(value, dict):
            data = value.get("data")
            if isinstance(data, list):
                tokens += len(data)
    # ~10 bytes per token/value covers the JSON digits, quoting, and commas.
    return tokens * 10


def chunk_datum_list(
    datum_list: List[Dict[str, Any]],
    *,
    max_len: int = MAX_CHUNK_LEN,
    max_bytes: int = MAX_CHUNK_BYTES,
) -> List[List[Dict[str, Any]]]:
    """Split a datum list into chunks bounded by count and estimated bytes.

    Each chunk holds at most ``max_len`` datums and stays under ``max_bytes`` of
    estimated payload, except that a single datum larger than ``max_bytes`` is
    kept on its own (it cannot be split further here). Datum order is preserved,
    so submitting the chunks in order reproduces the original batch.
    """
    if not datum_list:
        return []

    chunks: List[List[Dict[str, Any]]] = []
    current: List[Dict[str, Any]] = []
    current_bytes = 0
    for datum in datum_list:
        datum_bytes = _estimate_datum_bytes(datum)
        # Close the current chunk if adding this datum would exceed either
        # bound (but never emit an empty chunk just because one datum is huge).
        if current and (current_bytes + datum_bytes > max_bytes or len(current) >= max_len):
            chunks.append(current)
            current = []
            current_bytes = 0
        current.append(datum)
        current_bytes += datum_bytes
    if current:
        chunks.append(current)
    return chunks


def _result_datum_count(result: Any) -> int:
    """Datums a chunk's result covers, inferred from its per-datum loss outputs.

    Zero when the chunk carries none, which is the usual case: loss outputs are
    only returned when the caller asked for them. Used only as a fallback, since
    inferring the count from an optional field silently makes every chunk weigh
    the same.
    """
    return len(result.loss_fn_outputs or [])


def combine_forward_backward_results(
    results: List[Any], datum_counts: Optional[List[int]] = None
) -> Any:
    """Fold per-chunk forward-backward results into one, in chunk order.

    Scalar metrics are combined so the caller sees the whole-batch step:
    ``loss`` and other per-example means are recomputed as a datum-count-
    weighted average over the chunks that reported them (each chunk reports
    the mean over its own datums), while ``grad_norm``, a property of the
    accumulated gradient after all chunks, is taken from the final chunk and
    omitted when that chunk does not report it. The counts in
    :data:`SUMMED_METRICS` are totalled, since each chunk counts part of the
    same batch. Non-scalar or unrecognized metrics fall back to the last
    chunk that reported them.
    ``loss_fn_outputs`` lists are concatenated in chunk order so per-datum
    outputs line up with the batch.

    Args:
        results: One result per chunk, in chunk order.
        datum_counts: Datums per chunk, in the same order. The caller built the
            chunks, so it is the only place the real sizes are known; without
            them the weights fall back to the per-datum loss outputs, which are
            usually absent and would make an uneven split (1024, 1024, 100)
            report a plain mean instead of the weighted one.

    Single-element input returns that result unchanged, so an unchunked call is
    unaffected.
    """
    if len(results) == 1:
        return results[0]

    # Local import avoids a module cycle (types imports nothing from here).
    from localsession.types import ForwardBackwardOutput

    per_chunk_metrics = [r.metrics for r in results]
    if datum_counts is not None and len(datum_counts) == len(results):
        weights = [max(count, 1) for count in datum_counts]
    else:
        weights = [max(_result_datum_count(r), 1) for r in results]

    combined_metrics: Dict[str, float] = {}
    # Keyed off every chunk, not just the last: a metric the earlier chunks
    # report and the final one omits would otherwise vanish from the result.
    for key in dict.fromkeys(k for m in per_chunk_metrics for k in m):
        present = [(m[key], w) for m, w in zip(per_chunk_metrics, weights) if key in m]
        values = [v for v, _ in present]
        if any(not isinstance(v, (int, float)) for v in values):
            combined_metrics[key] = values[-1]
        elif key == "grad_norm" or key.endswith("/grad_norm"):
            # A gradient norm describes the gradient accumulated across all
            # chunks, so only the final chunk's is the whole-batch value and an
            # average of norms is not one. Reported under a namespaced key, so
            # the suffix is matched rather than the whole name.
            if key in per_chunk_metrics[-1]:
                combined_metrics[key] = per_chunk_metrics[-1][key]
        elif key in SUMMED_METRICS:
            # The chunks each carry part of one batch, so the total is the
            # batch's. Averaging reported a count no chunk measured, smaller
            # than a single chunk's own.
            combined_metrics[key] = sum(values)
        else:
            # Weighted over the chunks that reported it, so a metric only some
            # chunks carry is still their mean and not diluted by the rest.
            key_w = sum(w for _, w in present)
            combined_metrics[key] = sum(v * w for v, w in present) / key_w

    # Per-datum loss outputs concatenate in chunk order, so they line up with
    # the batch and read exactly as an unchunked pass would.
    entries: List[Any] = []
    for r in results:
        entries.extend(r.loss_fn_outputs or [])
    combined_outputs: Optional[Any] = entries or None

    raw: Dict[str, Any] = {"forwardBackward": {"metrics": combined_metrics}}
    if combined_outputs is not None:
        raw["forwardBackward"]["lossFnOutputs"] = combined_outputs
    return ForwardBackwardOutput._from_api(raw)
