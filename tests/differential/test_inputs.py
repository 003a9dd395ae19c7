"""localsession's input coercion, chunking and chunk combiner against the SDK's ``_utils``.

Batches are built from recipes so that typed elements (``Datum``, ``ModelInput``, ...) are made
with each package's own classes; the outputs must be equal, or both calls must raise the same
exception type naming the same problem.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._sdk import our_inputs, our_types, ours, outcome, sdk, sdk_types, sdk_utils

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LOSSES = [None, "cross_entropy", "importance_sampling", "ppo", "cispo", "custom"]


class ByteTokenizer:
    """Text to UTF-8 bytes: a tokenizer both implementations call the same way."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())


tokens = st.lists(st.integers(0, 300), min_size=0, max_size=5)
values = st.lists(st.floats(-1, 1, allow_nan=False), min_size=0, max_size=5)
# rows of values: rectangular, ragged, mixed with numbers, or nested one level too deep
rows = st.one_of(
    st.lists(st.lists(st.floats(-1, 1), min_size=2, max_size=2), max_size=3),
    st.lists(values, min_size=1, max_size=3),
    st.lists(st.one_of(st.floats(-1, 1), values), min_size=1, max_size=3),
    st.lists(st.lists(values, min_size=1, max_size=2), min_size=1, max_size=2),
)
loss_inputs = st.dictionaries(
    st.sampled_from(["target_tokens", "weights", "logprobs", "advantages", "old_logprobs", "x"]),
    st.one_of(tokens, values, rows),
    max_size=4,
)

# An element recipe: (form, payload) turned into a concrete element per package.
recipes = st.one_of(
    st.tuples(st.just("tokens"), tokens),
    st.tuples(st.just("text"), st.text(min_size=0, max_size=4)),
    st.tuples(st.just("wire"), st.tuples(tokens, st.one_of(st.none(), loss_inputs))),
    st.tuples(st.just("snake"), st.tuples(tokens, st.one_of(st.none(), loss_inputs))),
    st.tuples(st.just("datum"), st.tuples(tokens, st.one_of(st.none(), loss_inputs))),
    st.tuples(st.just("datum_text"), st.text(min_size=1, max_size=4)),
    st.tuples(st.just("model_input"), tokens),
    st.tuples(st.just("chunk"), tokens),
    st.tuples(st.just("int"), st.integers(0, 9)),
    st.tuples(st.just("junk"), st.sampled_from([None, 1.5, {"x": 1}, (1, 2)])),
)


def _element(recipe: tuple[str, Any], module: Any) -> Any:
    form, payload = recipe
    if form in ("tokens", "text", "int", "junk"):
        return payload
    if form == "wire":
        ids, extra = payload
        wire: dict[str, Any] = {"modelInput": {"chunks": [{"tokens": ids, "type": "encoded_text"}]}}
        if extra is not None:
            wire["lossFnInputs"] = extra
        return wire
    if form == "snake":
        ids, extra = payload
        return {"model_input": {"chunks": [{"tokens": ids}]}, "loss_fn_inputs": extra}
    if form == "datum":
        ids, extra = payload
        return module.Datum(model_input=module.ModelInput.from_ints(ids), loss_fn_inputs=extra)
    if form == "datum_text":
        return module.Datum(prompt=payload)
    if form == "model_input":
        return module.ModelInput.from_ints(payload)
    return module.EncodedTextChunk(tokens=payload)


def _coerce(utils: Any, module: Any, batch: list[Any], shared: Any, loss: Any) -> Any:
    return outcome(
        lambda: utils.batch_to_datum_list(
            [_element(r, module) for r in batch] if isinstance(batch, list) else batch,
            tokenizer=None,
            loss_fn_inputs=shared,
            tokenizer_loader=ByteTokenizer,
            loss_fn_name=loss,
        )
    )


def _same_problem(mine: tuple[str, Any], theirs: tuple[str, Any]) -> None:
    assert mine[0] == theirs[0], (mine, theirs)
    if mine[0] == "ok":
        assert mine[1] == theirs[1]
        return
    assert type(mine[1]) is type(theirs[1]), (mine[1], theirs[1])
    a, b = str(mine[1]), str(theirs[1])
    if a.startswith("datum["):  # the local checks: the same datum, key and counts
        assert a.split(". ")[0] == b.split(". ")[0]


@SETTINGS
@given(
    batch=st.lists(recipes, min_size=0, max_size=4),
    shared=st.one_of(st.none(), loss_inputs),
    loss=st.sampled_from(LOSSES),
)
def test_batches_coerce_alike(batch: list[Any], shared: Any, loss: Any) -> None:
    _same_problem(
        _coerce(our_inputs, ours, batch, shared, loss),
        _coerce(sdk_utils, sdk, batch, shared, loss),
    )


@SETTINGS
@given(
    ids=st.lists(st.integers(0, 300), min_size=1, max_size=6),
    shared=st.one_of(st.none(), loss_inputs),
    loss=st.sampled_from(LOSSES),
)
def test_single_token_list_batch_alike(ids: list[int], shared: Any, loss: Any) -> None:
    mine = outcome(lambda: our_inputs.batch_to_datum_list(ids, loss_fn_inputs=shared))
    theirs = outcome(lambda: sdk_utils.batch_to_datum_list(ids, loss_fn_inputs=shared))
    _same_problem(mine, theirs)
    mixed = [*ids, "x"]
    _same_problem(
        outcome(lambda: our_inputs.batch_to_datum_list(mixed)),
        outcome(lambda: sdk_utils.batch_to_datum_list(mixed)),
    )


@SETTINGS
@given(recipe=recipes)
def test_prompts_coerce_alike(recipe: tuple[str, Any]) -> None:
    def run(utils: Any, module: Any) -> Any:
        element = _element(recipe, module)
        return outcome(lambda: utils.prompt_to_model_input(element, tokenizer_loader=ByteTokenizer))

    _same_problem(run(our_inputs, ours), run(sdk_utils, sdk))


def _datums(count: int, width: int) -> list[dict[str, Any]]:
    return [
        {
            "modelInput": {"chunks": [{"tokens": list(range(width)), "type": "encoded_text"}]},
            "lossFnInputs": {"weights": {"data": [1.0] * width, "dtype": "float32"}},
        }
        for _ in range(count)
    ]


@pytest.mark.parametrize("count", [1, 1023, 1024, 1025, 2048, 2049])
def test_chunk_boundaries_at_the_datum_limit(count: int) -> None:
    batch = _datums(count, 2)
    mine, theirs = our_inputs.chunk_datum_list(batch), sdk_utils.chunk_datum_list(batch)
    assert [len(c) for c in mine] == [len(c) for c in theirs]
    assert max(len(c) for c in mine) <= 1024


@pytest.mark.parametrize("width", [499_999, 500_000, 500_001])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_chunk_boundaries_at_the_byte_budget(width: int, count: int) -> None:
    """10 bytes per token and per loss value: 500 000 tokens with weights is the whole 10 MB."""
    batch = _datums(count, width // 2)
    mine, theirs = our_inputs.chunk_datum_list(batch), sdk_utils.chunk_datum_list(batch)
    assert [len(c) for c in mine] == [len(c) for c in theirs]


@SETTINGS
@given(
    widths=st.lists(st.integers(1, 40), min_size=0, max_size=30),
    max_len=st.integers(1, 8),
    max_bytes=st.integers(1, 900),
)
def test_chunking_alike(widths: list[int], max_len: int, max_bytes: int) -> None:
    batch = [_datums(1, w)[0] for w in widths]
    mine = our_inputs.chunk_datum_list(batch, max_len=max_len, max_bytes=max_bytes)
    theirs = sdk_utils.chunk_datum_list(batch, max_len=max_len, max_bytes=max_bytes)
    assert mine == theirs


metric_names = st.sampled_from(
    ["loss", "actor/pg_loss", "grad_norm", "actor/grad_norm", "global_token_num", "mfu", "tag"]
)
metric_values = st.one_of(
    st.floats(-10, 10, allow_nan=False), st.integers(0, 1000), st.just("text")
)
chunk_results = st.lists(
    st.tuples(
        st.dictionaries(metric_names, metric_values, max_size=5),
        st.one_of(st.none(), st.lists(st.just({"actor/pg_loss": 0.5}), max_size=3)),
    ),
    min_size=1,
    max_size=4,
)


@SETTINGS
@given(
    chunks=chunk_results,
    counts=st.one_of(st.none(), st.lists(st.integers(0, 1025), max_size=4)),
)
def test_chunk_combiner_alike(chunks: list[Any], counts: Any) -> None:
    def run(utils: Any, types: Any) -> Any:
        results = []
        for metrics, outputs in chunks:
            section: dict[str, Any] = {"metrics": dict(metrics)}
            if outputs is not None:
                section["lossFnOutputs"] = outputs
            results.append(types.ForwardBackwardOutput._from_api({"forwardBackward": section}))
        combined = utils.combine_forward_backward_results(results, datum_counts=counts)
        return combined.metrics, combined.loss_fn_outputs

    assert run(our_inputs, our_types) == run(sdk_utils, sdk_types)


def test_a_1100_datum_batch_combines_as_the_sdk_does() -> None:
    """The sizes a real 1,100-datum batch splits into, with uneven chunk metrics."""
    sizes = [len(c) for c in our_inputs.chunk_datum_list(_datums(1100, 2))]
    assert sizes == [1024, 76]

    def run(utils: Any, types: Any) -> Any:
        parts = [
            types.ForwardBackwardOutput._from_api(
                {"forwardBackward": {"metrics": {"loss": loss, "global_token_num": n * 2}}}
            )
            for loss, n in zip([2.0, 4.0], sizes, strict=True)
        ]
        return utils.combine_forward_backward_results(parts, datum_counts=sizes).metrics

    mine = run(our_inputs, our_types)
    assert mine == run(sdk_utils, sdk_types)
    assert mine["loss"] == pytest.approx((2.0 * 1024 + 4.0 * 76) / 1100)  # per-datum mean
    assert mine["global_token_num"] == 2200
