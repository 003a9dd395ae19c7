"""Model packages (docs/semantics.md#5): exact resume, portability to plain peft/transformers,
sampling from snapshots, and loads that fail with nothing changed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel, get_peft_model_state_dict
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from localsession.engine.builtin import build_builtin
from localsession.engine.checkpoint import ADAPTER_WEIGHTS, OPTIMIZER_CONFIG, OPTIMIZER_WEIGHTS
from localsession.engine.sampling import BatchSampler
from localsession.engine.torch_engine import TorchEngine
from localsession.port import AdamHyperparams, EngineInputError, SampleRequest

from .conftest import TINY
from .helpers import make_datum, random_tokens

# peft / transformers deprecations that users cannot act on
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

PROMPT = [257, *b"Once upon a time"]
STEPS = [
    AdamHyperparams(learning_rate=1e-2),
    AdamHyperparams(learning_rate=5e-3, beta1=0.8, grad_clip_norm=0.5),
    AdamHyperparams(learning_rate=2e-3, lora_plus_lr_ratio=4.0, weight_decay=0.1),
]


def train(engine: TorchEngine, steps: list[AdamHyperparams], seed: int) -> None:
    """One forward_backward + optim_step per entry, on datums that differ per step."""
    for i, adam in enumerate(steps):
        datums = [make_datum(t) for t in random_tokens(2, 24, seed=seed + i)]
        engine.forward_backward(datums, "cross_entropy", None, backward=True)
        engine.optim_step(adam)


def adapter(engine: TorchEngine) -> dict[str, torch.Tensor]:
    return engine.adapter_state_dict()


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def moments(engine: TorchEngine) -> dict[str, tuple[int, torch.Tensor, torch.Tensor]]:
    return {n: (m.step, m.exp_avg, m.exp_avg_sq) for n, m in engine.optimizer.named_state().items()}


def grads(engine: TorchEngine) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in engine.model.named_parameters() if p.grad is not None}


def forward_logprobs(model: Any, tokens: list[int]) -> torch.Tensor:
    """[T] log p(target) with the wire datum's targets (tokens[1:] + [0]), no padding."""
    targets = torch.tensor(tokens[1:] + [0])
    with torch.no_grad():
        logits_TV = model(input_ids=torch.tensor([tokens])).logits[0].float()
    return torch.log_softmax(logits_TV, dim=-1).gather(-1, targets[:, None])[:, 0]


def engine_logprobs(engine: TorchEngine, tokens: list[int]) -> torch.Tensor:
    out = engine.forward([make_datum(tokens)], "cross_entropy", None)
    return torch.tensor(out.outputs[0].logprobs)


def test_resume_with_optimizer_is_bit_identical(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    a = make_engine(seed=1)
    train(a, STEPS, seed=10)
    a.save_package(str(tmp_path / "ckpt"), include_optimizer=True, merge_weights=False)
    train(a, STEPS, seed=20)

    b = make_engine(seed=1)
    train(b, STEPS[:1], seed=99)  # B has moments of its own, and pending gradients
    b.forward_backward([make_datum(PROMPT)], "cross_entropy", None, backward=True)
    b.load_package(str(tmp_path / "ckpt"), load_optimizer=True)
    assert not b.optimizer.has_grad()
    assert b.optimizer.last_params == STEPS[-1]
    train(b, STEPS, seed=20)
    assert_same(adapter(a), adapter(b))
    ma, mb = moments(a), moments(b)
    assert ma.keys() == mb.keys() and len(ma) == len(adapter(a))
    for name, (step, m1, m2) in ma.items():
        assert step == mb[name][0] == 2 * len(STEPS)
        assert torch.equal(m1, mb[name][1]) and torch.equal(m2, mb[name][2])

    c = make_engine(seed=1)
    c.load_package(str(tmp_path / "ckpt"), load_optimizer=False)  # fresh AdamW state
    assert c.optimizer.named_state() == {}
    train(c, STEPS, seed=20)
    diff = max(float((adapter(a)[n] - v).abs().max()) for n, v in adapter(c).items())
    assert diff > 1e-4


def test_optimizer_json_records_steps_and_hyperparameters(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    engine = make_engine()
    train(engine, STEPS, seed=3)
    engine.save_package(str(tmp_path), include_optimizer=True, merge_weights=False)
    meta = json.loads((tmp_path / OPTIMIZER_CONFIG).read_text())
    assert meta["step"] == len(STEPS)
    assert set(meta["steps"].values()) == {len(STEPS)}
    assert meta["last_adam_params"] == {
        "learningRate": 2e-3,
        "beta1": 0.9,
        "beta2": 0.999,
        "eps": 1e-8,
        "weightDecay": 0.1,
        "loraPlusLrRatio": 4.0,
    }
    assert meta["last_adam_params"]["loraPlusLrRatio"] == 4.0
    tensors = load_file(str(tmp_path / OPTIMIZER_WEIGHTS))
    assert len(tensors) == 2 * len(meta["steps"])
    live = moments(engine)
    for name, (_, exp_avg, exp_avg_sq) in live.items():
        key = name.replace(".default.", ".")
        assert torch.equal(tensors[f"{key}.exp_avg"], exp_avg)
        assert torch.equal(tensors[f"{key}.exp_avg_sq"], exp_avg_sq)


def test_adapter_loads_with_plain_peft(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    engine = make_engine(rank=4, alpha=8, seed=2)
    train(engine, STEPS, seed=5)
    engine.save_package(str(tmp_path), include_optimizer=False, merge_weights=False)
    saved = load_file(str(tmp_path / ADAPTER_WEIGHTS))
    expected = get_peft_model_state_dict(engine.model, save_embedding_layers=False)
    assert saved.keys() == expected.keys()
    assert all(torch.equal(saved[k], expected[k]) for k in saved)

    fresh, _ = build_builtin(TINY)
    loaded = PeftModel.from_pretrained(fresh, str(tmp_path))
    assert loaded.peft_config["default"].base_model_name_or_path is None  # no hub id
    for tokens in random_tokens(2, 30, seed=8):
        torch.testing.assert_close(
            forward_logprobs(loaded, tokens), engine_logprobs(engine, tokens), atol=1e-5, rtol=0
        )


def test_merged_model_loads_alone_and_package_has_no_pickle(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    engine = make_engine(seed=3)
    train(engine, STEPS, seed=6)
    tokens = random_tokens(1, 30, seed=9)[0]
    before = engine_logprobs(engine, tokens)
    live = adapter(engine)
    engine.save_package(str(tmp_path), include_optimizer=True, merge_weights=True)
    assert_same(live, adapter(engine))  # the live model was not merged
    assert torch.equal(engine_logprobs(engine, tokens), before)

    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "merged"))
    assert tokenizer.encode("hi") == engine.get_tokenizer().encode("hi")
    assert not any("lora" in n for n, _ in merged.named_parameters())
    torch.testing.assert_close(forward_logprobs(merged, tokens), before, atol=1e-5, rtol=0)

    top = {p.name for p in tmp_path.iterdir()}
    assert top == {
        "adapter_config.json",
        "adapter_model.safetensors",
        "optimizer.json",
        "optimizer.safetensors",
        "merged",
    }
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".pickle")]
    for path in files:
        if path.parent == tmp_path:
            assert path.suffix in (".json", ".safetensors")
        else:  # merged/: weights, configs and tokenizer files
            assert path.suffix in (".json", ".safetensors", ".jinja", ".txt", ".model"), path


def test_sampling_from_a_snapshot_is_isolated(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    engine, twin = make_engine(seed=4), make_engine(seed=4)
    for e in (engine, twin):
        train(e, STEPS, seed=30)
    pkg = str(tmp_path / "pkg")
    engine.save_package(pkg, include_optimizer=False, merge_weights=False)
    requests = [SampleRequest(prompt=PROMPT, max_tokens=16, temperature=0.0, num_samples=1)]
    loaded = engine._loaded
    live_sampler = BatchSampler(
        engine.model, loaded.tokenizer, loaded.eos_ids, loaded.pad_id, loaded.device
    )
    with torch.no_grad():  # reference: the live adapter, right after the save
        ref = live_sampler.run(requests)[0][0]
    ref_lp = engine.compute_logprobs(pkg, PROMPT)
    torch.testing.assert_close(
        torch.tensor(ref_lp[1:]), engine_logprobs(engine, PROMPT)[:-1], atol=1e-5, rtol=0
    )

    for e in (engine, twin):  # move the live adapter well away from the snapshot
        train(e, [AdamHyperparams(learning_rate=5e-2)] * 2, seed=40)
    live = adapter(engine)
    (out,) = engine.sample(pkg, requests)
    assert out.sequences[0].tokens == ref.tokens
    torch.testing.assert_close(
        torch.tensor(out.sequences[0].logprobs), torch.tensor(ref.logprobs), atol=1e-5, rtol=0
    )
    assert engine.compute_logprobs(pkg, PROMPT) == ref_lp
    assert_same(live, adapter(engine))  # restored bit for bit
    with torch.no_grad():
        now = live_sampler.run(requests)[0][0]
    assert now.logprobs != ref.logprobs
    assert engine_logprobs(engine, PROMPT)[:-1].tolist() != ref_lp[1:]

    # training after snapshot sampling continues exactly like an engine that never sampled
    train(engine, STEPS, seed=50)
    train(twin, STEPS, seed=50)
    assert_same(adapter(engine), adapter(twin))


def test_snapshot_cache_follows_the_file(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    engine = make_engine(seed=5)
    train(engine, STEPS[:1], seed=60)
    engine.save_package(str(tmp_path), include_optimizer=False, merge_weights=False)
    first = engine.compute_logprobs(str(tmp_path), PROMPT)
    assert engine.compute_logprobs(str(tmp_path), PROMPT) == first  # cached
    train(engine, STEPS[:1], seed=61)
    path = tmp_path / ADAPTER_WEIGHTS
    path.unlink()  # a new package at the same path
    engine.save_package(str(tmp_path), include_optimizer=False, merge_weights=False)
    assert engine.compute_logprobs(str(tmp_path), PROMPT) != first
    base = engine.compute_logprobs(None, PROMPT)
    assert base != first


def test_load_package_zeroes_gradients(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    engine = make_engine()
    engine.save_package(str(tmp_path), include_optimizer=True, merge_weights=False)
    for load_optimizer in (True, False):
        engine.forward_backward([make_datum(PROMPT)], "cross_entropy", None, backward=True)
        assert engine.optimizer.has_grad()
        engine.load_package(str(tmp_path), load_optimizer=load_optimizer)
        assert not engine.optimizer.has_grad()
        assert engine.optimizer.named_state() == {}  # saved before any step


def snapshot_state(engine: TorchEngine) -> tuple[Any, ...]:
    return adapter(engine), moments(engine), grads(engine)


def assert_unchanged(engine: TorchEngine, state: tuple[Any, ...]) -> None:
    live, moms, grad = state
    assert_same(live, adapter(engine))
    assert_same(grad, grads(engine))
    now = moments(engine)
    assert now.keys() == moms.keys()
    for name, (step, m1, m2) in moms.items():
        assert now[name][0] == step
        assert torch.equal(now[name][1], m1) and torch.equal(now[name][2], m2)


def test_incompatible_packages_fail_with_nothing_changed(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    rank4 = make_engine(rank=4, alpha=16)
    train(rank4, STEPS[:1], seed=70)
    rank4.save_package(str(tmp_path / "r4"), include_optimizer=True, merge_weights=False)
    engine = make_engine(rank=8, alpha=16)
    train(engine, STEPS[:2], seed=71)
    engine.forward_backward([make_datum(PROMPT)], "cross_entropy", None, backward=True)
    engine.save_package(str(tmp_path / "no_opt"), include_optimizer=False, merge_weights=False)
    state = snapshot_state(engine)

    for load_optimizer in (True, False):
        with pytest.raises(EngineInputError, match="rank 4.*rank 8"):
            engine.load_package(str(tmp_path / "r4"), load_optimizer=load_optimizer)
        assert_unchanged(engine, state)
    with pytest.raises(EngineInputError, match="optimizer.json is missing.*load_state"):
        engine.load_package(str(tmp_path / "no_opt"), load_optimizer=True)
    assert_unchanged(engine, state)

    # optimizer state this optimizer cannot step: A matrices at two step counts
    engine.save_package(str(tmp_path / "skewed"), include_optimizer=True, merge_weights=False)
    config = tmp_path / "skewed" / OPTIMIZER_CONFIG
    meta = json.loads(config.read_text())
    first_a = next(k for k in sorted(meta["steps"]) if "lora_A" in k)
    meta["steps"][first_a] += 1
    config.write_text(json.dumps(meta))
    skew = r"lora_A parameters, at step counts \[2, 3\].*load_state"
    with pytest.raises(EngineInputError, match=skew):
        engine.load_package(str(tmp_path / "skewed"), load_optimizer=True)
    assert_unchanged(engine, state)

    # same rank in the config but a tensor missing / mis-shaped
    broken = tmp_path / "no_opt" / ADAPTER_WEIGHTS
    tensors = load_file(str(broken))
    first = sorted(tensors)[0]
    save_file({k: v for k, v in tensors.items() if k != first}, str(broken))
    with pytest.raises(EngineInputError, match="1 missing"):
        engine.load_package(str(tmp_path / "no_opt"), load_optimizer=False)
    tensors[first] = tensors[first][:, :-1].contiguous()
    save_file(tensors, str(broken))
    with pytest.raises(EngineInputError, match="shape"):
        engine.load_package(str(tmp_path / "no_opt"), load_optimizer=False)
    assert_unchanged(engine, state)

    # samplers read any rank (test_sampling_packages.py), not a broken or absent package
    engine.compute_logprobs(str(tmp_path / "r4"), PROMPT)
    for weights in (str(tmp_path / "no_opt"), str(tmp_path / "absent")):
        with pytest.raises(EngineInputError, match="package"):
            engine.sample(weights, [SampleRequest(prompt=PROMPT, max_tokens=2)])
        with pytest.raises(EngineInputError, match="package"):
            engine.compute_logprobs(weights, PROMPT)
    assert_unchanged(engine, state)
