"""``make bench``'s multi-adapter row: several adapters of one base sampled at once, against
one raw ``generate`` per adapter, one after another (issue 56, item 4).

Ours: one session takes ``adapters`` training steps, saving a snapshot sampler after each
(``save_weights_and_get_sampling_client``), so there are ``adapters`` distinct adapters on one
base. A round submits ``per_adapter`` ``sample(num_samples=4, max_tokens)`` calls to every
sampler at once and waits for all of them: whatever the engine does with streams of different
adapters (one batch per adapter, or one batch of all of them) is what is timed, through the
public client.

Baseline: what a user without localsession writes. Each snapshot's package is read back from
disk with peft (``PeftModel.from_pretrained`` on the plain base, then ``merge_and_unload``: a
plain model per adapter, the fastest way to sample it), and a round runs one batched
``generate`` per adapter over that adapter's prompts × 4 (bench/raw_loop.py's
``batched_generate``: full-vocabulary sampling at temperature 1), one after another. Before
timing, each merged model's log-probabilities of a prompt are checked against its sampler's
``compute_logprobs`` (so both sides run the same weights), and the adapters are checked to
differ from one another.

The ratio is tokens/s ours over raw, the median of the per-round ratios (bench/common.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from bench.common import Row, interleaved, median, meets, paired_rates, reported

TARGET = "≥ 2.5×"
#: A learning rate large enough that one step moves each adapter visibly (the adapters must
#: differ for the row to mean several adapters; speed does not depend on the values).
ADAPTER_LR = 1e-3
#: The largest |Δ logprob| allowed between a merged raw model and its sampler (float32: the
#: merged ``W + sBA`` and the unmerged ``Wx + sB(Ax)`` round apart by ~1e-5 of the logits).
SAME_WEIGHTS_ATOL = 1e-3


def _train_step(tc: Any, rows: list[list[int]]) -> None:
    from localsession import AdamParams, Datum, ModelInput

    data = [
        Datum(
            model_input=ModelInput.from_ints(r[:-1]),
            loss_fn_inputs={"target_tokens": r[1:], "weights": [1.0] * (len(r) - 1)},
        )
        for r in rows
    ]
    tc.forward_backward(data, "cross_entropy").result()
    tc.optim_step(AdamParams(learning_rate=ADAPTER_LR)).result()


@torch.no_grad()
def _prompt_logprobs(model: Any, tokens: list[int]) -> torch.Tensor:
    """log p(tokens[i] | tokens[:i]) for i >= 1 from one plain forward. -> [T-1]"""
    ids_1T = torch.tensor([tokens])
    logits_1TV = model(input_ids=ids_1T, use_cache=False).logits.float()
    return torch.log_softmax(logits_1TV[0, :-1], -1).gather(-1, ids_1T[0, 1:, None])[:, 0]


def merged_from_package(name: str, package: Path) -> Any:
    """The plain base with the package's adapter merged in, as a user builds it with peft."""
    from peft import PeftModel

    from bench.raw_loop import load_plain

    base, _ = load_plain(name)
    return PeftModel.from_pretrained(base, str(package)).merge_and_unload().eval()


def adapter_rows(
    name: str, rounds: int, adapters: int, per_adapter: int, max_tokens: int
) -> list[Row]:
    """``adapters`` snapshots × ``per_adapter`` concurrent ``sample(n=4)`` calls vs one raw
    batched ``generate`` per adapter, in sequence (the module docstring)."""
    from bench.bench_real import ALPHA, RANK, client, text_prompts, token_rows
    from bench.raw_loop import batched_generate, load_plain

    _, tokenizer = load_plain(name)
    prompts = text_prompts(tokenizer, adapters * per_adapter)
    groups = [prompts[k * per_adapter : (k + 1) * per_adapter] for k in range(adapters)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    counts: dict[str, list[int]] = {"ours": [], "raw": []}
    with tempfile.TemporaryDirectory() as home:
        service, svc = client(home, strict=False)
        tc = svc.create_lora_training_client(name, rank=RANK, alpha=ALPHA)
        vocab = min(int(tc.get_tokenizer().vocab_size), 49152)
        samplers = []
        for k in range(adapters):
            _train_step(tc, token_rows(2, 16, vocab, seed=100 + k))
            samplers.append(tc.save_weights_and_get_sampling_client())
        merged = [
            merged_from_package(name, service.registry.path(s.model_package_arn)) for s in samplers
        ]
        check_same_weights(samplers, merged, prompts[0])
        generates = [
            batched_generate(m, g, pad, tokenizer.eos_token_id, max_tokens, 4)
            for m, g in zip(merged, groups, strict=True)
        ]

        def ours() -> None:
            counts["ours"].append(burst(samplers, groups, max_tokens))

        def raw() -> None:
            counts["raw"].append(sum(generate() for generate in generates))

        times = interleaved(reported({"ours": ours, "raw": raw}, "adapters"), rounds)
        tc.stop()
        service.close()
    ratios, rate = paired_rates(times, counts)
    return [
        Row(
            f"multi-adapter sampling: {adapters} adapters × {per_adapter} sample(n=4, "
            f"{max_tokens} tok), at once, vs {adapters} sequential raw generates on merged "
            "adapters (tok/s)",
            rate["ours"],
            "tok/s",
            TARGET,
            meets(TARGET, median(ratios)),
            rate["raw"],
            median(ratios),
            rounds=ratios,
        )
    ]


def burst(samplers: list[Any], groups: list[list[list[int]]], max_tokens: int) -> int:
    """Every sampler's ``sample(num_samples=4)`` calls (one per prompt of its group) submitted
    together, then waited on; returns the tokens generated."""
    from localsession import ModelInput, SamplingParams

    futures = [
        sampler.sample(
            ModelInput.from_ints(p),
            num_samples=4,
            sampling_params=SamplingParams(max_tokens=max_tokens, seed=10 + 100 * k + i),
        )
        for k, (sampler, group) in enumerate(zip(samplers, groups, strict=True))
        for i, p in enumerate(group)
    ]
    return sum(len(s.tokens) for f in futures for s in f.result(timeout=900).sequences)


def check_same_weights(samplers: list[Any], merged: list[Any], prompt: list[int]) -> None:
    """Each merged raw model scores ``prompt`` as its sampler does, and the adapters differ
    (else the row would time one adapter several times); raises AssertionError otherwise."""
    from localsession import ModelInput

    seen: list[torch.Tensor] = []
    for k, (sampler, model) in enumerate(zip(samplers, merged, strict=True)):
        got = sampler.compute_logprobs(ModelInput.from_ints(prompt)).result(timeout=600)[1:]
        ours_T = torch.tensor(got, dtype=torch.float32)
        raw_T = _prompt_logprobs(model, prompt)
        gap = float((ours_T - raw_T).abs().max())
        if gap > SAME_WEIGHTS_ATOL:
            raise AssertionError(f"adapter {k}: merged raw model differs from its sampler by {gap}")
        if any(float((ours_T - other).abs().max()) < 1e-5 for other in seen):
            raise AssertionError(f"adapter {k} scores the prompt as an earlier adapter does")
        seen.append(ours_T)
