"""``train_step.parse``'s batched path (``batch_fast.batched``, one tensor per column) against the
reference datum-by-datum path (``batch.parse_datums``):
the same batch for well-formed datums of every loss, and for anything else the same error
(the batched path declines it and the checked path names the datum and key). The batched
path converts a small batch with Python's builtins and a large one through numpy; the
``converter`` fixture runs each test with each."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from localsession.engine import batch_fast
from localsession.engine.batch import Batch
from localsession.engine.batch import parse_datums as exact_parse
from localsession.engine.batch_fast import batched
from localsession.engine.train_step import parse as parse_datums
from localsession.port import EngineInputError, TrainingDatum

CPU = torch.device("cpu")
VOCAB, PAD = 300, 7
FIELDS = ("tokens_BT", "targets_BT", "mask_BT", "weights_BT", "advantages_BT", "logprobs_BT",
          "ref_log_prob_BT", "temperature_BT")  # fmt: skip


@pytest.fixture(params=["python", "numpy"], autouse=True)
def converter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every batch small (checked in Python) or every batch large (through numpy)."""
    limit = 10**9 if request.param == "python" else 0
    monkeypatch.setattr(batch_fast, "SMALL_TOKENS", limit)
    return str(request.param)


def _datum(rng: random.Random, n: int, keys: tuple[str, ...]) -> TrainingDatum:
    """A port datum (as the runtime's parse hands it on) with random ids and values."""
    inputs: dict[str, Any] = {"target_tokens": [rng.randrange(VOCAB) for _ in range(n)]}
    for name in keys:
        low = 0.1 if name == "temperature" else -3.0
        inputs[name] = [rng.uniform(low, 3.0) for _ in range(n)]
    return TrainingDatum([rng.randrange(VOCAB) for _ in range(n)], inputs)


def _same(a: Batch, b: Batch) -> None:
    assert a.lengths == b.lengths
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape, name
            assert torch.equal(x, y), name


@pytest.mark.parametrize(
    ("loss_fn", "keys"),
    [
        ("cross_entropy", ("weights",)),
        ("cross_entropy", ("weights", "temperature")),
        ("importance_sampling", ("weights", "logprobs", "advantages")),
        ("ppo", ("weights", "logprobs", "advantages", "ref_log_prob")),
    ],
)
def test_the_batched_path_builds_what_the_checked_path_builds(
    loss_fn: str, keys: tuple[str, ...]
) -> None:
    rng = random.Random(len(keys))
    datums = [_datum(rng, n, keys) for n in (5, 12, 3, 12, 8)]
    fast = batched(datums, loss_fn, VOCAB, PAD, CPU, None)
    assert fast is not None
    _same(fast, exact_parse(datums, loss_fn, VOCAB, PAD, CPU))
    _same(parse_datums(datums, loss_fn, VOCAB, PAD, CPU), fast)


def _message(call: Any) -> str:
    with pytest.raises(EngineInputError) as info:
        call()
    return str(info.value)


def _broken(kind: str) -> list[TrainingDatum]:
    rng = random.Random(0)
    broken = [_datum(rng, 6, ("weights",)) for _ in range(3)]
    inputs = broken[1].loss_fn_inputs
    if kind == "token out of vocabulary":
        broken[2].tokens[2] = VOCAB
    elif kind == "fractional target":
        inputs["target_tokens"][3] = 2.5
    elif kind == "NaN weight":
        inputs["weights"][0] = float("nan")
    elif kind == "short column":
        inputs["weights"].pop()
    elif kind == "weights missing in one datum":
        del inputs["weights"]
    elif kind == "string value":
        inputs["weights"][2] = "x"
    elif kind == "negative token":
        broken[0].tokens[0] = -1
    # values numpy (the batched path's converter) would read where torch refuses them
    elif kind == "numeric string weight":
        inputs["weights"][1] = "1.5"
    elif kind == "None weight":
        inputs["weights"][1] = None
    elif kind == "weight past float32's range":
        inputs["weights"][1] = 1e39
    elif kind == "numeric string target":
        inputs["target_tokens"][1] = "5"
    elif kind == "infinite weight":
        inputs["weights"][4] = float("-inf")
    elif kind == "NaN advantage":
        inputs["advantages"] = [0.0, 1.0, float("nan"), 0.0, 0.0, 0.0]
    elif kind == "float among the tokens":
        broken[2].tokens[5] = 3.5
    elif kind == "zero temperature":
        for d in broken:
            d.loss_fn_inputs["temperature"] = [1.0] * 6
        inputs["temperature"][3] = 0.0
    elif kind == "token past the vocabulary in the last row":
        broken[2].loss_fn_inputs["target_tokens"][5] = VOCAB + 1
    return broken


@pytest.mark.parametrize(
    "kind",
    [
        "token out of vocabulary",
        "fractional target",
        "NaN weight",
        "short column",
        "weights missing in one datum",
        "string value",
        "negative token",
        "numeric string weight",
        "None weight",
        "weight past float32's range",
        "numeric string target",
        "infinite weight",
        "NaN advantage",
        "float among the tokens",
        "token past the vocabulary in the last row",
        "zero temperature",
    ],  # fmt: skip
)
def test_bad_datums_get_the_checked_paths_error(kind: str) -> None:
    datums = _broken(kind)
    loss = "ppo" if kind == "NaN advantage" else "cross_entropy"
    if loss == "ppo":
        for d in datums:
            d.loss_fn_inputs.setdefault("advantages", [0.0] * 6)
            d.loss_fn_inputs.update(logprobs=[0.0] * 6, ref_log_prob=[0.0] * 6)
    assert batched(datums, loss, VOCAB, PAD, CPU, None) is None
    expected = _message(lambda: exact_parse(datums, loss, VOCAB, PAD, CPU))
    assert _message(lambda: parse_datums(datums, loss, VOCAB, PAD, CPU)) == expected
    assert "datum" in expected


def test_convertible_values_still_parse() -> None:
    """Integral floats as ids and booleans as numbers: the checked path converts them."""
    rng = random.Random(1)
    datums = [_datum(rng, 4, ("weights",)) for _ in range(2)]
    datums[0].loss_fn_inputs["target_tokens"][0] = 5.0
    datums[1].loss_fn_inputs["weights"][0] = True
    batch = parse_datums(datums, "cross_entropy", VOCAB, PAD, CPU)
    assert int(batch.targets_BT[0, 0]) == 5 and float(batch.weights_BT[1, 0]) == 1.0


def test_a_datum_past_the_context_length_is_refused() -> None:
    datums = [_datum(random.Random(2), 10, ("weights",))]
    assert "maximum context length of 8" in _message(
        lambda: parse_datums(datums, "cross_entropy", VOCAB, PAD, CPU, max_length=8)
    )


def test_loss_inputs_mask_only_a_padded_batch() -> None:
    rng = random.Random(3)
    even = parse_datums(
        [_datum(rng, 5, ("weights",)) for _ in range(3)], "cross_entropy", VOCAB, PAD, CPU
    )
    assert even.loss_inputs().mask is None  # every position is real: nothing to mask
    ragged = parse_datums(
        [_datum(rng, n, ("weights",)) for n in (5, 2)], "cross_entropy", VOCAB, PAD, CPU
    )
    mask = ragged.loss_inputs().mask
    assert mask is not None
    assert mask.tolist() == [[True] * 5, [True, True, False, False, False]]
