"""TorchEngine sampling: seeds, stopping, batch invariance, and logprobs checked against
full-prefix recomputation with the plain base model (no KV cache)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from localsession.engine import scoring
from localsession.engine.sampling import BatchSampler
from localsession.engine.torch_engine import TorchEngine
from localsession.port import AdamHyperparams, EngineInputError, SampleRequest
from localsession.port_results import SampledSequence

from .helpers import make_datum

PROMPT = [257, *b"Once upon a time"]


def req(**kwargs: Any) -> SampleRequest:
    kwargs.setdefault("prompt", PROMPT)
    kwargs.setdefault("max_tokens", 24)
    return SampleRequest(**kwargs)


def full_logits(base: Any, tokens: list[int]) -> torch.Tensor:
    """[T, V] logits of the plain base model over the whole sequence, no cache."""
    with torch.no_grad():
        return base(input_ids=torch.tensor([tokens])).logits[0].float()


def test_fixed_seed_reproduces(tiny_engine: TorchEngine) -> None:
    a = tiny_engine.sample(None, [req(seed=123, num_samples=2)])
    b = tiny_engine.sample(None, [req(seed=123, num_samples=2)])
    assert a == b
    c = tiny_engine.sample(None, [req(seed=124, num_samples=1)])
    # stream i uses seed + i: seed 124's first stream is seed 123's second stream (logprobs
    # only within float tolerance: the batch shapes differ)
    assert c[0].sequences[0].tokens == a[0].sequences[1].tokens
    torch.testing.assert_close(
        torch.tensor(c[0].sequences[0].logprobs),
        torch.tensor(a[0].sequences[1].logprobs),
        atol=1e-5,
        rtol=0,
    )


def test_streams_differ_and_have_one_logprob_per_token(tiny_engine: TorchEngine) -> None:
    (out,) = tiny_engine.sample(None, [req(seed=5, num_samples=4)])
    seqs = out.sequences
    assert len(seqs) == 4
    assert len({tuple(s.tokens) for s in seqs}) == 4
    for s in seqs:
        assert s.stop_reason in ("stop", "length")
        assert len(s.logprobs) == len(s.tokens)
        if s.stop_reason == "length":
            assert len(s.tokens) == 24


def test_sampled_logprobs_match_full_recompute(
    tiny_engine: TorchEngine, tiny_base: tuple[Any, Any]
) -> None:
    base, _ = tiny_base
    (out,) = tiny_engine.sample(
        None, [req(seed=7, num_samples=2, temperature=0.7, top_k=20, top_p=0.9)]
    )
    for seq in out.sequences:
        tokens = seq.tokens
        logits = full_logits(base, PROMPT + tokens)[len(PROMPT) - 1 : -1]  # predicts tokens
        tempered = torch.log_softmax(logits / 0.7, dim=-1)
        expected = tempered[torch.arange(len(tokens)), torch.tensor(tokens)]
        torch.testing.assert_close(torch.tensor(seq.logprobs), expected, atol=1e-5, rtol=0)
        for t, token in enumerate(tokens):
            order = torch.argsort(logits[t], descending=True)
            rank = int((order == token).nonzero())
            assert rank < 20  # top-k respected
            probs = torch.softmax(logits[t] / 0.7, dim=-1)[order]
            assert float(probs[:rank].sum()) < 0.9  # inside the nucleus


def test_greedy_matches_full_recompute(
    tiny_engine: TorchEngine, tiny_base: tuple[Any, Any]
) -> None:
    base, _ = tiny_base
    (out,) = tiny_engine.sample(None, [req(temperature=0.0, max_tokens=16)])
    seq = out.sequences[0]
    tokens: list[int] = []
    logprobs: list[float] = []
    for _ in range(len(seq.tokens)):
        last = full_logits(base, PROMPT + tokens)[-1]
        tokens.append(int(last.argmax()))
        logprobs.append(float(torch.log_softmax(last, -1)[tokens[-1]]))  # T = 1 values
    assert seq.tokens == tokens
    torch.testing.assert_close(
        torch.tensor(seq.logprobs), torch.tensor(logprobs), atol=1e-5, rtol=0
    )


def test_a_top_k_past_the_vocabulary_keeps_every_word(tiny_engine: TorchEngine) -> None:
    """k >= V filters nothing, so it samples as top-k off does, up to a k past 2**63 (which
    no int64 tensor holds: it crashed the sampler)."""
    (off,) = tiny_engine.sample(None, [req(seed=4, max_tokens=12, top_k=-1)])
    for k in (tiny_engine.vocab_size, 10**6, 2**63, 2**70):
        (got,) = tiny_engine.sample(None, [req(seed=4, max_tokens=12, top_k=k)])
        assert got.sequences[0].tokens == off.sequences[0].tokens, k
        assert got.sequences[0].logprobs == off.sequences[0].logprobs, k


def test_stop_string(tiny_engine: TorchEngine) -> None:
    tok = tiny_engine.get_tokenizer()
    (free,) = tiny_engine.sample(None, [req(seed=11, max_tokens=48)])
    tokens = free.sequences[0].tokens
    text = tok.decode(tokens)
    ascii_at = [i for i, t in enumerate(tokens) if 32 < t < 127 and i >= 2]
    assert ascii_at, f"no ASCII byte sampled in {tokens}"
    k = ascii_at[0]
    stops = [chr(tokens[k])]
    if k + 1 < len(tokens) and 32 < tokens[k + 1] < 127:
        stops = [chr(tokens[k]) + chr(tokens[k + 1])]
    assert stops[0] in text
    # Independent expectation: the shortest prefix whose decoded text contains the stop.
    expected_n = next(n for n in range(1, len(tokens) + 1) if stops[0] in tok.decode(tokens[:n]))
    (stopped,) = tiny_engine.sample(None, [req(seed=11, max_tokens=48, stop=tuple(stops))])
    seq = stopped.sequences[0]
    assert seq.stop_reason == "stop"
    assert seq.tokens == tokens[:expected_n]
    assert stops[0] in tok.decode(seq.tokens)


def test_length_and_zero_max_tokens(tiny_engine: TorchEngine) -> None:
    out = tiny_engine.sample(None, [req(seed=3, max_tokens=5), req(seed=3, max_tokens=0)])
    first = out[0].sequences[0]
    assert first.stop_reason == "length" or first.tokens[-1] == 258
    assert len(first.tokens) <= 5
    assert out[1].sequences[0] == SampledSequence([], [], "length")


def test_eos_stops_and_is_included(make_engine: Callable[..., TorchEngine]) -> None:
    engine = make_engine()
    (greedy,) = engine.sample(None, [req(temperature=0.0, max_tokens=8)])
    tokens = greedy.sequences[0].tokens
    engine._sampler.eos_ids = frozenset({tokens[2]})  # pretend the third token is EOS
    (out,) = engine.sample(None, [req(temperature=0.0, max_tokens=8)])
    seq = out.sequences[0]
    first = tokens.index(tokens[2])
    assert seq.tokens == tokens[: first + 1] and seq.stop_reason == "stop"


def test_batch_invariance(tiny_engine: TorchEngine) -> None:
    target = req(seed=21, num_samples=2, temperature=0.9, top_p=0.95, max_tokens=20)
    alone = tiny_engine.sample(None, [target])[0]
    others = [
        req(
            prompt=[257, *b"A much longer prompt that pads the others on the left"],
            seed=1,
            num_samples=3,
            max_tokens=12,
            temperature=1.3,
            top_k=5,
        ),
        req(prompt=[257, 65], seed=2, temperature=0.0, max_tokens=30, stop=("e",)),
    ]
    batched = tiny_engine.sample(None, [others[0], target, others[1]])[1]
    for a, b in zip(alone.sequences, batched.sequences, strict=True):
        assert a.tokens == b.tokens and a.stop_reason == b.stop_reason
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )


def test_compute_logprobs_matches_forward(tiny_engine: TorchEngine) -> None:
    tokens = [257, *b"compute logprobs, please"]
    got = tiny_engine.compute_logprobs(None, tokens)
    assert len(got) == len(tokens) and got[0] is None
    fwd = tiny_engine.forward([make_datum(tokens)], "cross_entropy", None)
    expected = fwd.outputs[0].logprobs[:-1]  # position t predicts t + 1
    torch.testing.assert_close(torch.tensor(got[1:]), torch.tensor(expected), atol=1e-6, rtol=0)


def test_compute_logprobs_batch_agrees_with_the_base_model_prompt_by_prompt(
    tiny_engine: TorchEngine, tiny_base: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompts of different lengths in one call (right-padded together, and split into
    several forwards under a small logit budget) each get their own unpadded logprobs,
    checked against the plain base model's log-softmax, one prompt at a time."""
    base, _ = tiny_base
    prompts = [[257, *b"a longer prompt here"], [257, *b"hi"], [257], [257, *b"mid size"]]
    got_all = tiny_engine.compute_logprobs_batch(None, prompts)
    width, vocab = max(map(len, prompts)), tiny_engine.vocab_size
    monkeypatch.setattr(scoring, "LOGPROB_LOGIT_BYTES", 2 * width * vocab * 4)  # 2 a forward
    for got in (got_all, tiny_engine.compute_logprobs_batch(None, prompts)):
        assert [len(g) for g in got] == [len(p) for p in prompts]
        for prompt, values in zip(prompts, got, strict=True):
            assert values[0] is None
            logprobs = torch.log_softmax(full_logits(base, prompt)[:-1], dim=-1)
            targets = torch.tensor(prompt[1:], dtype=torch.long)
            expected = logprobs[torch.arange(len(prompt) - 1), targets]
            torch.testing.assert_close(torch.tensor(values[1:]), expected, atol=1e-5, rtol=0)
    with pytest.raises(EngineInputError, match="outside the vocabulary"):
        tiny_engine.compute_logprobs_batch(None, [[257, 1], [257, vocab]])


def test_prompt_logprobs_and_topk(tiny_engine: TorchEngine, tiny_base: tuple[Any, Any]) -> None:
    base, _ = tiny_base
    (out,) = tiny_engine.sample(
        None, [req(max_tokens=1, include_prompt_logprobs=True, topk_prompt_logprobs=3)]
    )
    prompt_lp, topk = out.prompt_logprobs, out.topk_prompt_logprobs
    assert len(prompt_lp) == len(topk) == len(PROMPT)
    assert prompt_lp[0] == 0.0 and topk[0] == []
    logprobs = torch.log_softmax(full_logits(base, PROMPT)[:-1], dim=-1)
    expected = logprobs[torch.arange(len(PROMPT) - 1), torch.tensor(PROMPT[1:])]
    torch.testing.assert_close(torch.tensor(prompt_lp[1:]), expected, atol=1e-5, rtol=0)
    values, ids = logprobs.topk(3, dim=-1)
    for t in range(1, len(PROMPT)):
        assert [e.token_id for e in topk[t]] == ids[t - 1].tolist()
        torch.testing.assert_close(
            torch.tensor([e.logprob for e in topk[t]]), values[t - 1], atol=1e-5, rtol=0
        )
    (plain,) = tiny_engine.sample(None, [req(max_tokens=1)])
    assert plain.prompt_logprobs is None and plain.topk_prompt_logprobs is None


def test_tempered_logprobs_give_ratio_one(tiny_engine: TorchEngine) -> None:
    (out,) = tiny_engine.sample(None, [req(seed=8, temperature=0.6, max_tokens=10)])
    seq = out.sequences[0]
    tokens = PROMPT + seq.tokens
    n_prompt = len(PROMPT)
    datum = make_datum(
        tokens[:-1],
        target_tokens=tokens[1:],
        temperature=[0.6] * (len(tokens) - 1),
        logprobs=[0.0] * (n_prompt - 1) + seq.logprobs,
        advantages=[1.0] * (len(tokens) - 1),
        weights=[0.0] * (n_prompt - 1) + [1.0] * len(seq.tokens),
    )
    res = tiny_engine.forward([datum], "ppo", None)
    lp = res.outputs[0].logprobs[n_prompt - 1 :]
    torch.testing.assert_close(torch.tensor(lp), torch.tensor(seq.logprobs), atol=1e-5, rtol=0)
    assert abs(res.metrics["actor/ppo_kl"]) < 1e-5


def test_new_adapter_samples_like_base_and_training_keeps_base_sampling(
    make_engine: Callable[..., TorchEngine], tiny_base: tuple[Any, Any]
) -> None:
    engine = make_engine()
    base, tok = tiny_base
    loaded = engine._loaded
    requests = [req(seed=4, num_samples=2, max_tokens=12)]
    base_sampler = BatchSampler(base, tok, loaded.eos_ids, loaded.pad_id, loaded.device)
    adapted_sampler = BatchSampler(engine.model, tok, loaded.eos_ids, loaded.pad_id, loaded.device)
    expected = [s.tokens for s in base_sampler.run(requests)[0]]
    assert [s.tokens for s in adapted_sampler.run(requests)[0]] == expected  # B = 0
    engine.forward_backward([make_datum(PROMPT)], "cross_entropy", None, backward=True)
    engine.optim_step(AdamHyperparams(learning_rate=1e-2))
    (out,) = engine.sample(None, requests)
    assert [s.tokens for s in out.sequences] == expected  # samplers see the base model


def test_sampling_input_errors(tiny_engine: TorchEngine) -> None:
    # weights name a package directory (test_checkpoint covers real ones)
    with pytest.raises(EngineInputError, match="no such package directory"):
        tiny_engine.sample("arn:aws:sagemaker:us-east-1:0:model-package/g/1", [req()])
    with pytest.raises(EngineInputError, match="no such package directory"):
        tiny_engine.compute_logprobs("pkg", PROMPT)
    with pytest.raises(EngineInputError, match="request 1: `prompt`"):
        tiny_engine.sample(None, [req(), req(prompt=[])])
    with pytest.raises(EngineInputError, match="259"):
        tiny_engine.sample(None, [req(prompt=[257, 259])])
    with pytest.raises(EngineInputError, match="top_p"):
        tiny_engine.sample(None, [req(top_p=0.0)])
