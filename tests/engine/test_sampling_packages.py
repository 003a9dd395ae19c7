"""Sampling a package saved at another LoRA rank or alpha than the sampling session's
(issue 16 item 3): the engine uses the package's own adapter config.

The reference is independent of the engine's sampling path: plain peft loading the package
onto a fresh copy of the base model (``PeftModel.from_pretrained``), and the saving engine's
own greedy decode of its package.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from peft import PeftModel

from localsession.engine.builtin import build_builtin
from localsession.engine.torch_engine import TorchEngine
from localsession.port import AdamHyperparams, EngineInputError, SampleRequest

from .conftest import TINY
from .helpers import make_datum, random_tokens

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

PROMPT = [257, *b"Once upon a time"]


def _trained_package(engine: TorchEngine, directory: Path) -> str:
    for i in range(2):
        datums = [make_datum(t) for t in random_tokens(2, 24, seed=30 + i)]
        engine.forward_backward(datums, "cross_entropy", None, backward=True)
        engine.optim_step(AdamHyperparams(learning_rate=2e-2))
    engine.save_package(str(directory), include_optimizer=False, merge_weights=False)
    return str(directory)


def _peft_logprobs(package: str, tokens: list[int]) -> list[float]:
    """log p(tokens[i] | tokens[:i]) for i >= 1, by plain peft on a fresh base model."""
    base, _ = build_builtin(TINY)
    model = PeftModel.from_pretrained(base, package).eval()
    with torch.no_grad():
        logits_TV = model(input_ids=torch.tensor([tokens])).logits[0].float()
    logp_TV = torch.log_softmax(logits_TV, dim=-1)
    return [float(logp_TV[i - 1, tokens[i]]) for i in range(1, len(tokens))]


@pytest.mark.parametrize(("rank", "alpha"), [(4, 8), (8, 64), (32, 8), (48, 64)])
def test_a_sampler_reads_a_package_of_any_rank_and_alpha(
    make_engine: Callable[..., TorchEngine], tmp_path: Path, rank: int, alpha: int
) -> None:
    saver = make_engine(rank=rank, alpha=alpha, seed=3)
    package = _trained_package(saver, tmp_path / "pkg")
    sampler = make_engine(rank=32, alpha=64, seed=0)  # the SDK's sampling session
    live_before = sampler.adapter_state_dict()

    tokens = PROMPT + list(b" there was")
    got = sampler.compute_logprobs(package, tokens)
    assert got[0] is None
    expected = _peft_logprobs(package, tokens)
    torch.testing.assert_close(torch.tensor(got[1:]), torch.tensor(expected), atol=2e-5, rtol=0)
    base = sampler.compute_logprobs(None, tokens)
    assert max(abs(a - b) for a, b in zip(got[1:], base[1:], strict=True)) > 1e-3  # trained

    request = SampleRequest(
        prompt=PROMPT, max_tokens=12, temperature=0.0, seed=0, include_prompt_logprobs=True
    )
    mine = sampler.sample(package, [request])[0]
    theirs = saver.sample(package, [request])[0]
    assert mine.sequences[0].tokens == theirs.sequences[0].tokens
    torch.testing.assert_close(
        torch.tensor(mine.prompt_logprobs[1:]),
        torch.tensor(expected[: len(PROMPT) - 1]),
        atol=2e-5,
        rtol=0,
    )

    # the sampler's own adapter and scale are untouched, bit for bit
    after = sampler.adapter_state_dict()
    assert all(torch.equal(live_before[k], after[k]) for k in live_before)
    datum = make_datum(tokens)
    fresh = make_engine(rank=32, alpha=64, seed=0)
    a = sampler.forward([datum], "cross_entropy", None).outputs[0].logprobs
    b = fresh.forward([datum], "cross_entropy", None).outputs[0].logprobs
    assert a == b


def test_a_package_with_the_wrong_shapes_is_refused(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    saver = make_engine(rank=4, alpha=8, seed=3)
    package = Path(_trained_package(saver, tmp_path / "pkg"))
    config = package / "adapter_config.json"
    config.write_text(config.read_text().replace('"r": 4', '"r": 6'))  # lies about its rank
    sampler = make_engine(rank=32, alpha=64, seed=0)
    with pytest.raises(EngineInputError, match="shape"):
        sampler.compute_logprobs(str(package), PROMPT)
