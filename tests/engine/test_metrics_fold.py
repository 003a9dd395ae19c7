"""Metrics as the SDK reads them (issue 16 item 6, docs/semantics.md#1).

The independent reference is the installed SDK's own chunk combiner
(``combine_forward_backward_results``): a 1,100-datum batch run as one op must report the
``loss``, ``actor/pg_loss``, ``global_token_num`` and ``actor/grad_norm`` the SDK folds from
the same batch run as its 1,024 + 76 chunks. Throughput metrics are checked against a FLOP
count made here and the wall time measured around the call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

from localsession.engine.torch_engine import TorchEngine
from localsession.port import (
    AdamHyperparams,
    EngineInputError,
    EngineSpec,
    ResolvedModel,
    SampleRequest,
)
from localsession.port_results import ForwardResult
from localsession.runtime.sagemaker_wire import result_body
from localsession.runtime.validate import training_datums

from .conftest import OPTIONS, TINY
from .helpers import make_datum, output_keys, output_row, wire_datum

sdk_utils = pytest.importorskip("sagemaker.train.training_session._utils")
sdk_types = pytest.importorskip("sagemaker.train.training_session.types")

FOLDED = ("loss", "actor/pg_loss", "global_token_num", "actor/grad_norm", "promised_flops")


def _datums(n: int, seed: int) -> list[dict[str, Any]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        k = 3 + i % 5
        tokens = torch.randint(0, 256, (k,), generator=gen).tolist()
        sampler = (-5.5 + 2.0 * (torch.rand(k, generator=gen) - 0.5)).tolist()
        out.append(
            wire_datum(
                tokens,
                logprobs=sampler,
                advantages=torch.randn(k, generator=gen).tolist(),
                weights=[0.0] + torch.rand(k - 1, generator=gen).tolist(),
                ref_log_prob=[v + 0.1 for v in sampler],
            )
        )
    return out


def _sdk_output(result: ForwardResult) -> Any:
    """The result as the SDK reads it off the SageMaker wire."""
    return sdk_types.ForwardBackwardOutput._from_api({"forwardBackward": result_body(result)})


@pytest.mark.parametrize("loss_fn", ["ppo", "cross_entropy"])
def test_a_1100_datum_batch_reports_the_sdk_fold_of_its_chunks(
    make_engine: Callable[..., TorchEngine], loss_fn: str
) -> None:
    datums = _datums(1100, seed=1)
    if loss_fn == "cross_entropy":
        datums = [
            {
                **d,
                "lossFnInputs": {
                    k: v for k, v in d["lossFnInputs"].items() if k in ("target_tokens", "weights")
                },
            }
            for d in datums
        ]
    whole_engine, chunk_engine = make_engine(seed=5), make_engine(seed=5)
    for engine in (whole_engine, chunk_engine):  # one identical step: LoRA B non-zero
        engine.forward_backward(training_datums(datums[:8]), "cross_entropy", None, backward=True)
        engine.optim_step(AdamHyperparams(learning_rate=1e-2))

    started = time.perf_counter()
    whole = whole_engine.forward_backward(training_datums(datums), loss_fn, None, backward=True)
    wall = time.perf_counter() - started
    chunks = sdk_utils.chunk_datum_list(datums)
    assert [len(c) for c in chunks] == [1024, 76]
    parts = [
        chunk_engine.forward_backward(training_datums(c), loss_fn, None, backward=True)
        for c in chunks
    ]
    folded = sdk_utils.combine_forward_backward_results(
        [_sdk_output(p) for p in parts], datum_counts=[len(c) for c in chunks]
    )

    got = whole.metrics
    assert set(folded.metrics) == set(got)
    for key in FOLDED:
        assert folded.metrics[key] == pytest.approx(got[key], rel=1e-5, abs=1e-6), key
    assert got["actor/pg_loss"] == got["loss"]
    assert got["global_token_num"] == sum(
        len(d["modelInput"]["chunks"][0]["tokens"]) for d in datums
    )
    # loss is the per-datum mean of each datum's summed loss
    sums = [sum(o.elementwise_loss) for o in whole.outputs]
    assert got["loss"] == pytest.approx(sum(sums) / len(sums), rel=1e-5)
    per_datum = [o.extra["actor/pg_loss"] for o in whole.outputs]
    assert per_datum == pytest.approx(sums, rel=1e-5, abs=1e-6)
    actor = {"actor/pg_loss", "actor/grad_norm"}
    if loss_fn == "ppo":
        actor |= {"actor/pg_clipfrac", "actor/ppo_kl", "actor/kl_ref"}
    assert output_keys(whole.outputs[0]) == {"logprobs", "elementwise_loss"} | actor
    # per-datum outputs line up with the SDK's concatenation, actor/* keys included
    assert len(folded.loss_fn_outputs) == len(whole.outputs) == 1100
    for mine, theirs in zip(whole.outputs[::97], folded.loss_fn_outputs[::97], strict=True):
        assert output_keys(mine) == set(theirs)
        for key in output_keys(mine) - {"actor/grad_norm"}:  # a chunk's norm: its own, partial
            assert output_row(mine, key) == pytest.approx(theirs[key]["data"], abs=1e-5), key

    # throughput: the model FLOPs counted here, over a peak, in at most the wall time
    mfu, flops, peak = got["mfu"], got["estimated_flops"], got["promised_flops"]
    assert 0.0 < mfu <= 1.0 and peak > 1e9
    base = whole_engine.model.get_base_model()
    emb = base.get_input_embeddings().weight
    tied = base.get_output_embeddings().weight is emb
    params = sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n)
    params = params - (0 if tied else emb.numel())
    lengths = [len(d["modelInput"]["chunks"][0]["tokens"]) for d in datums]
    config = base.config
    forward = 2 * params * sum(lengths) + 4 * config.num_hidden_layers * config.hidden_size * sum(
        n * n for n in lengths
    )
    assert flops == pytest.approx(3 * forward, rel=1e-9)
    assert mfu >= flops / (peak * wall) * 0.999  # its elapsed time is inside the wall time


def test_over_long_inputs_fail_naming_the_limit_and_the_length() -> None:
    """A model map entry's ``max_context`` is the limit (the built-in's own, 131,072, is too
    long to exercise here)."""
    tiny = ResolvedModel(name="short/tiny", kind="builtin", target=TINY, max_context=2048)
    tiny_engine = TorchEngine(
        EngineSpec(TINY, rank=8, alpha=16, seed=0, model=tiny, options=OPTIONS)
    )
    limit = tiny_engine.max_positions
    assert limit == 2048 and tiny_engine.model.config.max_position_embeddings == 131072
    long = [7] * (limit + 1)
    fits = [7] * limit
    with pytest.raises(EngineInputError, match=rf"datum 1: .* {limit + 1} tokens.* {limit}"):
        tiny_engine.forward([make_datum([1, 2, 3]), make_datum(long)], "cross_entropy", None)
    assert not tiny_engine.optimizer.has_grad()
    tiny_engine.forward([make_datum(fits)], "cross_entropy", None)  # exactly the limit runs

    with pytest.raises(EngineInputError, match=rf"{limit - 10 + 11}.* {limit}"):
        tiny_engine.sample(None, [SampleRequest(prompt=[1] * (limit - 10), max_tokens=11)])
    done = tiny_engine.sample(
        None, [SampleRequest(prompt=[1] * (limit - 10), max_tokens=10, temperature=0.0)]
    )
    assert len(done[0].sequences[0].tokens) <= 10
    with pytest.raises(EngineInputError, match=rf"{limit + 1} tokens.* {limit}"):
        tiny_engine.compute_logprobs(None, long)
    tiny_engine.close()
