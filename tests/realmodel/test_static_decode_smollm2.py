"""The static decoder against the dynamic reference on the real SmolLM2-135M (float32, CPU):
the same tokens, logprobs within 1e-5 (one short case; the built-in models carry the
option-by-option matrix, tests/engine/test_static_decode.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from localsession.engine.sampling import BatchSampler
from localsession.port import SampleRequest

pytestmark = pytest.mark.slow


def test_smollm2_static_decode_equals_the_dynamic_loop(smol_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smol_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(smol_dir)
    prompt = tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]
    requests = [
        SampleRequest(
            prompt=prompt,
            num_samples=2,
            max_tokens=24,
            seed=3,
            temperature=0.8,
            top_k=40,
            topk_sample_logprobs=3,
        ),
        SampleRequest(prompt=prompt[:3], max_tokens=24, temperature=0.0, stop=(".",)),
        SampleRequest(prompt=prompt, max_tokens=20, seed=9, top_p=0.9, stop_at_eos=False),
    ]
    eos = frozenset({int(tokenizer.eos_token_id)})
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    results = {}
    with torch.no_grad():
        for decode in ("dynamic", "static"):
            sampler = BatchSampler(model, tokenizer, eos, pad, torch.device("cpu"), decode, "off")
            results[decode] = sampler.run(requests)
    decoded = 0
    for want, got in zip(results["dynamic"], results["static"], strict=True):
        for a, b in zip(want, got, strict=True):
            assert (a.tokens, a.stop_reason) == (b.tokens, b.stop_reason)
            torch.testing.assert_close(
                torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
            )
            for ra, rb in zip(a.topk_rows, b.topk_rows, strict=True):
                assert [t for t, _ in ra] == [t for t, _ in rb]
            decoded += len(a.tokens)
    assert decoded >= 40
