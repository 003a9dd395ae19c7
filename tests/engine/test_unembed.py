"""``EngineSpec.train_unembed``: LoRA on the output head too (Tinker's ``train_unembed``).

On the built-in tiny model (untied head): the head gets an adapter that starts at zero,
takes a nonzero gradient and moves with ``optim_step``, while every other module's seeded A
is the same as without it. On a tied copy of it (head = input embedding): the embedding
never changes, the merged decoding copy (its head low-rank, still tied) matches the
adapter's logits before and after a re-merge, and a merged export, which cannot hold two
different tied tensors, is refused by name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from localsession.engine.base_pool import load_private
from localsession.engine.builtin import save_builtin
from localsession.engine.checkpoint import merged_state_dict
from localsession.engine.merged import (
    LowRankHead,
    adapted_layers,
    merged_bytes,
    plain_model,
    remerge_,
)
from localsession.engine.torch_engine import TorchEngine
from localsession.port import AdamHyperparams, EngineInputError, EngineSpec, ResolvedModel

from .conftest import OPTIONS
from .helpers import make_datum

TINY = "localsession/tiny"
TOKENS = [1, 5, 9, 13, 17, 21, 25, 29, 33]
HEAD = ".lm_head.lora_"
ADAM = AdamHyperparams(learning_rate=1e-2)


@pytest.fixture
def engines() -> Iterator[tuple[TorchEngine, TorchEngine]]:
    plain = TorchEngine(EngineSpec(TINY, rank=4, alpha=16, seed=3, options=OPTIONS))
    head = TorchEngine(
        EngineSpec(TINY, rank=4, alpha=16, seed=3, train_unembed=True, options=OPTIONS)
    )
    yield plain, head
    plain.close()
    head.close()


def _grads(engine: TorchEngine) -> dict[str, torch.Tensor]:
    return {n: p.grad for n, p in engine.model.named_parameters() if p.grad is not None}


def test_the_head_adapter_trains_and_the_rest_is_seeded_as_without_it(
    engines: tuple[TorchEngine, TorchEngine],
) -> None:
    plain, head = engines
    before = head.adapter_state_dict()
    head_keys = sorted(k for k in before if HEAD in k)
    assert [k.split(HEAD)[1].split(".")[0] for k in head_keys] == ["A", "B"]
    assert torch.count_nonzero(before[head_keys[1]]) == 0  # B starts at zero
    others = plain.adapter_state_dict()
    assert {k: v for k, v in before.items() if HEAD not in k}.keys() == others.keys()
    for key, value in others.items():  # the head's A is drawn last: the rest is unchanged
        assert torch.equal(before[key], value), key

    datum = make_datum(TOKENS)
    a = plain.forward([datum], "cross_entropy", None).outputs
    b = head.forward([datum], "cross_entropy", None).outputs
    # B = 0: the same function as the base model (the plain engine's fused head rounds the
    # log-softmax's sums in another order: head_logprobs.py)
    for got, want in zip(b, a, strict=True):
        assert got.logprobs == pytest.approx(want.logprobs, rel=1e-6, abs=1e-6)
        assert got.elementwise_loss == pytest.approx(want.elementwise_loss, rel=1e-6, abs=1e-6)

    head.forward_backward([datum], "cross_entropy", None, backward=True)
    grad_B = _grads(head)[head_keys[1]]  # [V, r]
    assert float(grad_B.abs().sum()) > 0.0
    head.optim_step(ADAM)
    after = head.adapter_state_dict()
    assert float((after[head_keys[1]] - before[head_keys[1]]).abs().sum()) > 0.0


@pytest.fixture(scope="module")
def tied_tiny(tmp_path_factory: pytest.TempPathFactory) -> ResolvedModel:
    """``localsession/tiny`` saved with its head tied to the input embedding."""
    directory = save_builtin(TINY, tmp_path_factory.mktemp("tied-tiny"))
    config_file = Path(directory) / "config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "tie_word_embeddings": True}))
    weights_file = Path(directory) / "model.safetensors"
    weights = load_file(str(weights_file))
    weights.pop("lm_head.weight")  # tied: the head is the embedding
    save_file(weights, str(weights_file), metadata={"format": "pt"})
    return ResolvedModel(name="local/tied-tiny", kind="local", target=str(directory))


def _logits(model: Any) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([TOKENS])).logits  # [1, T, V]


def test_a_tied_head_adapts_its_output_only(tied_tiny: ResolvedModel) -> None:
    spec = EngineSpec(tied_tiny.name, rank=4, alpha=16, seed=0, train_unembed=True, options=OPTIONS)
    loaded = load_private(spec, tied_tiny)
    base = loaded.model.get_base_model()
    embedding = base.get_input_embeddings().weight
    head_layer = base.get_output_embeddings()
    assert head_layer.get_base_layer().weight is embedding  # still tied
    engine = TorchEngine(spec, loaded)
    try:
        start = embedding.detach().clone()
        for _ in range(2):
            engine.forward_backward([make_datum(TOKENS)], "cross_entropy", None, backward=True)
            engine.optim_step(ADAM)
        assert torch.equal(embedding, start)  # the embedding (and the base head) never move
        trained = _logits(loaded.model)
        merged = plain_model(loaded.model, merge=True)
        assert torch.allclose(_logits(merged), trained, atol=1e-5, rtol=0)
        assert torch.equal(merged.get_input_embeddings().weight, start)
        head = merged.get_output_embeddings()
        assert isinstance(head, LowRankHead) and head.base_layer.weight is embedding
        layers = adapted_layers(loaded.model).values()
        others = sum(m.get_base_layer().weight.numel() for m in layers if m is not head_layer)
        vocab, width = embedding.shape  # the head's copy: A [4, d] and B [V, 4], no V×d
        assert merged_bytes(loaded.model) == 4 * (others + 4 * (width + vocab))
        for _ in range(2):  # a later snapshot, re-merged in place
            engine.forward_backward([make_datum(TOKENS)], "cross_entropy", None, backward=True)
            engine.optim_step(ADAM)
        remerge_(merged, loaded.model)
        assert torch.allclose(_logits(merged), _logits(loaded.model), atol=1e-5, rtol=0)
        assert not torch.allclose(_logits(plain_model(loaded.model, merge=False)), trained)
        with pytest.raises(EngineInputError, match="train_unembed"):
            merged_state_dict(loaded.model)
    finally:
        engine.close()
