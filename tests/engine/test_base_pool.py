"""One base, many adapters (base_pool.py) and the merged-copy cache (merged.py).

- Storage identity: sessions on one base hold the *same* base tensors (``data_ptr``), while
  each owns distinct LoRA tensors; the last close frees the base.
- No interference: two sessions on a shared base, driven through an interleaved script of
  training, sampling, saves and loads, give bit-for-bit the results of two sessions that
  each loaded a private copy of the base (``base_pool.load_private``, no pool).
- The merged-copy cache stays within its budget and evicts least-recently-used copies; a
  budget too small for one copy decodes unmerged, with the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from localsession.engine import decoders
from localsession.engine.base_pool import POOL, load_private
from localsession.engine.merged import MergedCache, merged_bytes
from localsession.engine.torch_engine import TorchEngine
from localsession.port import AdamHyperparams, EngineSpec, SampleRequest
from localsession.port_results import ForwardResult, OptimResult

from .conftest import OPTIONS
from .helpers import make_datum, random_tokens

SMALL = "localsession/small"


def _base_tensors(engine: TorchEngine) -> dict[str, torch.Tensor]:
    return {n: p for n, p in engine.model.named_parameters() if not p.requires_grad}


def test_sessions_share_base_storage(make_engine: Callable[..., TorchEngine]) -> None:
    a, b = make_engine(seed=0), make_engine(seed=1, rank=4)
    base_a, base_b = _base_tensors(a), _base_tensors(b)
    assert base_a.keys() == base_b.keys() and base_a
    for name, tensor in base_a.items():
        assert tensor.data_ptr() == base_b[name].data_ptr(), name
    lora_a = {n: p for n, p in a.model.named_parameters() if p.requires_grad}
    lora_b = {n: p for n, p in b.model.named_parameters() if p.requires_grad}
    ptrs_a = {p.data_ptr() for p in lora_a.values()}
    assert ptrs_a.isdisjoint(p.data_ptr() for p in lora_b.values())
    assert a.model is not b.model
    ptrs = {t.data_ptr() for t in base_a.values()}
    owners = [e for e in POOL.entries() if ptrs <= {t.data_ptr() for t in e.model.parameters()}]
    assert len(owners) == 1  # one pooled copy holds them
    entry = owners[0]
    refs = entry.refs  # a, b, and any other open session on the tiny model
    assert refs >= 2
    a.close()
    assert entry.refs == refs - 1 and entry in POOL.entries()
    b.close()
    assert entry.refs == refs - 2
    assert (entry in POOL.entries()) == (refs > 2)


def test_different_bases_are_not_shared(make_engine: Callable[..., TorchEngine]) -> None:
    tiny, small = make_engine(), make_engine(base_model=SMALL)
    ptrs_tiny = {p.data_ptr() for p in _base_tensors(tiny).values()}
    assert ptrs_tiny.isdisjoint(p.data_ptr() for p in _base_tensors(small).values())


def _script(a: TorchEngine, b: TorchEngine, tmp: Path) -> list[Any]:
    """An interleaved run of two sessions: every result, in order."""
    out: list[Any] = []
    data_a = [make_datum(t) for t in random_tokens(3, 24, seed=1)]
    data_b = [make_datum(t) for t in random_tokens(2, 20, seed=2)]
    adam = AdamHyperparams(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0)
    prompt = random_tokens(1, 6, seed=3)[0]
    request = SampleRequest(prompt=prompt, num_samples=2, max_tokens=6, seed=7)
    for step in range(2):
        out.append(a.forward_backward(data_a, "cross_entropy", None, backward=True))
        out.append(b.sample(None, [request]))
        out.append(b.forward_backward(data_b, "cross_entropy", None, backward=True))
        out.append(a.optim_step(adam))
        out.append(b.optim_step(adam))
        a.save_package(str(tmp / f"a{step}"), include_optimizer=True, merge_weights=False)
        out.append(b.sample(str(tmp / f"a{step}"), [request]))
        out.append(a.sample(str(tmp / f"a{step}"), [request]))
        out.append(a.compute_logprobs(None, prompt))
    b.load_package(str(tmp / "a1"), load_optimizer=True)
    out.append(b.forward_backward(data_a, "cross_entropy", None, backward=True))
    out.append(b.optim_step(adam))
    out.append(b.compute_logprobs(str(tmp / "a0"), prompt))
    out.append({k: v.tolist() for k, v in b.adapter_state_dict().items()})
    out.append({k: v.tolist() for k, v in a.adapter_state_dict().items()})
    return out


def test_shared_base_is_bit_identical_to_private_copies(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    spec_a = EngineSpec("localsession/tiny", rank=8, alpha=16, seed=0, options=OPTIONS)
    spec_b = EngineSpec("localsession/tiny", rank=8, alpha=16, seed=5, options=OPTIONS)
    private_a, private_b = (TorchEngine(s, loaded=load_private(s)) for s in (spec_a, spec_b))
    try:
        assert not any(
            p.data_ptr() == q.data_ptr()
            for p, q in zip(
                _base_tensors(private_a).values(), _base_tensors(private_b).values(), strict=True
            )
        )
        expected = _script(private_a, private_b, tmp_path / "private")
    finally:
        private_a.close()
        private_b.close()
    shared_a, shared_b = make_engine(seed=0), make_engine(seed=5)
    got = _script(shared_a, shared_b, tmp_path / "shared")
    assert _untimed(got) == _untimed(expected)  # floats compared exactly: bit for bit


def _untimed(results: list[Any]) -> list[Any]:
    """The results without ``mfu``, the one number that depends on the wall clock."""
    for result in results:
        if isinstance(result, (ForwardResult, OptimResult)):
            result.metrics.pop("mfu", None)
    return results


def test_merged_cache_budget_and_lru(
    make_engine: Callable[..., TorchEngine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = MergedCache()  # private, so other tests' sessions do not count
    monkeypatch.setattr(decoders, "MERGED_CACHE", cache)
    size = merged_bytes(make_engine(seed=0).model)
    two_fit = replace(OPTIONS, merged_cache_mb=2.5 * size / 2**20)  # LOCALSESSION_MERGED_CACHE_MB
    a, b = make_engine(seed=0, options=two_fit), make_engine(seed=1, options=two_fit)
    assert cache.budget == int(2.5 * size)
    request = SampleRequest(prompt=[5, 6, 7], num_samples=1, max_tokens=4, seed=1)
    adam = AdamHyperparams(learning_rate=1e-2)
    for engine in (a, b):
        engine.forward_backward([make_datum([1, 2, 3, 4])], "cross_entropy", None, backward=True)
        engine.optim_step(adam)
    a.save_package(str(tmp_path / "a"), include_optimizer=False, merge_weights=False)
    b.save_package(str(tmp_path / "b"), include_optimizer=False, merge_weights=False)
    a.forward_backward([make_datum([9, 8, 7, 6])], "cross_entropy", None, backward=True)
    a.optim_step(adam)
    a.save_package(str(tmp_path / "a2"), include_optimizer=False, merge_weights=False)
    first = a.sample(str(tmp_path / "a"), [request])
    b.sample(str(tmp_path / "b"), [request])
    assert cache.used == 2 * size
    a.sample(str(tmp_path / "a2"), [request])  # evicts a's "a" copy (least recent)
    assert cache.used <= 2.5 * size
    assert a.sample(str(tmp_path / "a"), [request]) == first  # rebuilt: same tokens
    assert cache.used <= 2.5 * size
    cache.set_budget(0)  # LOCALSESSION_MERGED_CACHE_MB=0, no copies: decode unmerged
    cache.drop_owner(a._decoders.owner)
    unmerged = a.sample(str(tmp_path / "a"), [request])
    assert unmerged[0].sequences[0].tokens == first[0].sequences[0].tokens
    lp_merged = first[0].sequences[0].logprobs
    lp_unmerged = unmerged[0].sequences[0].logprobs
    assert lp_unmerged == pytest.approx(lp_merged, abs=1e-5)
