"""SmolLM2-135M-Instruct through localsession, checked against transformers and peft directly.

Every expected value comes from an independent computation on the converted directory:
``AutoModelForCausalLM.from_pretrained`` for the base and merged models, ``generate`` for
greedy decoding, ``peft.PeftModel.from_pretrained`` for a saved adapter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from localsession import (
    AdamParams,
    Datum,
    ModelInput,
    SamplingParams,
    ServiceClient,
    TensorData,
    TrainingClient,
)
from localsession.engine.gguf import MARKER, ensure_converted
from localsession.runtime.service import Service

QUESTION = "What is 2 + 3? Answer with just the number."


def hf_model(path: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


@torch.no_grad()
def token_logprobs(model: Any, tokens: list[int]) -> torch.Tensor:
    """log p(tokens[i] | tokens[:i]) for i >= 1, from one plain forward pass. -> [T-1]"""
    logits_TV = model(torch.tensor([tokens])).logits[0].float()
    return torch.log_softmax(logits_TV[:-1], -1).gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0]


def prompt_tokens(tokenizer: Any, question: str = QUESTION) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    return list(ids)


@pytest.fixture(scope="module")
def session(relaxed_module: ServiceClient, smol_dir: Path) -> Iterator[TrainingClient]:
    with relaxed_module.create_lora_training_client(str(smol_dir), rank=8, alpha=16) as tc:
        yield tc


@pytest.fixture(scope="module")
def relaxed_module(service: Service) -> ServiceClient:
    return ServiceClient(
        role_arn="arn:aws:iam::000000000000:role/localsession-tests", backend=service, strict=False
    )


def test_conversion_is_cached_and_reused(
    shipped_gguf: Path, smol_cache: Path, smol_dir: Path
) -> None:
    marker = smol_dir / MARKER
    stamp = marker.stat().st_mtime_ns
    again = ensure_converted(shipped_gguf, smol_cache)
    assert again == smol_dir and marker.stat().st_mtime_ns == stamp  # not converted again
    assert [p.name for p in smol_cache.iterdir() if p.name.startswith(".")] == []  # no temp dirs
    config = json.loads((smol_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    tokenizer_config = json.loads((smol_dir / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tokenizer_config["chat_template"]
    assert (smol_dir / "model.safetensors").is_file()
    assert (smol_dir / "generation_config.json").is_file()


def test_session_uses_the_models_tokenizer_and_chat_template(session: TrainingClient) -> None:
    tok = session.get_tokenizer()
    assert tok.eos_token == "<|im_end|>" and len(tok) == 49152
    ids = prompt_tokens(tok)
    text = tok.decode(ids)
    assert text.endswith("<|im_start|>user\n" + QUESTION + "<|im_end|>\n<|im_start|>assistant\n")


def test_greedy_chat_sampling_stops_at_im_end_like_generate(
    session: TrainingClient, smol_dir: Path
) -> None:
    tok = session.get_tokenizer()
    prompt = prompt_tokens(tok)
    sampler = session.save_weights_and_get_sampling_client()
    greedy = SamplingParams(max_tokens=48, temperature=0.0, seed=0)
    seq = sampler.sample(prompt, 1, greedy).result(timeout=120).sequences[0]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert seq.stop_reason == "stop", tok.decode(seq.tokens)
    expected = (
        hf_model(smol_dir)
        .generate(torch.tensor([prompt]), max_new_tokens=48, do_sample=False, eos_token_id=im_end)[
            0, len(prompt) :
        ]
        .tolist()
    )
    assert expected[-1] == im_end
    assert seq.tokens == expected  # the new adapter (B = 0) decodes exactly like the base


def test_the_real_model_keeps_its_own_8192_positions(
    session: TrainingClient, smol_dir: Path
) -> None:
    """A real model is no stand-in: prompt + ``max_tokens`` past its 8,192 positions fails
    the op with the clear error, naming both numbers and the fix (built-ins take 131,072)."""
    config = json.loads((smol_dir / "config.json").read_text())
    assert config["max_position_embeddings"] == 8192
    sampler = session.save_weights_and_get_sampling_client()
    prompt = prompt_tokens(session.get_tokenizer())
    with pytest.raises(Exception, match="maximum context length of 8192") as failed:
        sampler.sample(prompt, 1, SamplingParams(max_tokens=8192)).result(timeout=120)
    message = str(failed.value)
    assert f"{len(prompt) + 8192} positions" in message and "lower max_tokens" in message
    fits = SamplingParams(max_tokens=8192 - len(prompt), temperature=0.0, stop=["\n", " "])
    assert sampler.sample(prompt, 1, fits).result(timeout=120).sequences[0].tokens


def test_compute_logprobs_equals_a_direct_forward_pass(
    session: TrainingClient, smol_dir: Path
) -> None:
    tok = session.get_tokenizer()
    tokens = prompt_tokens(tok) + tok.encode("2 + 3 = 5", add_special_tokens=False)
    sampler = session.save_weights_and_get_sampling_client()
    got = sampler.compute_logprobs(ModelInput.from_ints(tokens)).result(timeout=120)
    assert got[0] is None and len(got) == len(tokens)
    expected = token_logprobs(hf_model(smol_dir), tokens)
    torch.testing.assert_close(torch.tensor(got[1:]), expected, atol=1e-4, rtol=0)


def sft_datum(tok: Any, question: str, answer: str) -> Datum:
    prompt = prompt_tokens(tok, question)
    tokens = prompt + tok.encode(answer, add_special_tokens=False) + [tok.eos_token_id]
    weights = [0.0] * (len(prompt) - 1) + [1.0] * (len(tokens) - len(prompt))
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": TensorData(data=tokens[1:], dtype="int64"),
            "weights": TensorData(data=weights),
        },
    )


def test_sft_lowers_the_loss_and_packages_load_in_transformers_and_peft(
    relaxed_module: ServiceClient, service: Service, smol_dir: Path
) -> None:
    from peft import PeftModel

    with relaxed_module.create_lora_training_client(str(smol_dir), rank=8, alpha=16) as tc:
        tok = tc.get_tokenizer()
        batch = [sft_datum(tok, "What is the colour of the sky on Zorblax?", "Violet, always.")]
        before = tc.forward(batch, "cross_entropy").result(timeout=120).metrics["loss"]
        for _ in range(2):
            tc.forward_backward(batch, "cross_entropy")
            tc.optim_step(AdamParams(learning_rate=2e-3))
        after = tc.forward(batch, "cross_entropy").result(timeout=120).metrics["loss"]
        assert after < 0.8 * before, (before, after)
        saved = tc.save_weights_for_sampler(merge_weights=True).result(timeout=300)
        assert saved.model_package_arn is not None
        # Samples from the package as loaded back from disk (a per-request ARN).
        sampler = tc.create_sampling_client(saved.model_package_arn)
        tokens = prompt_tokens(tok, "Why is the sky violet?") + tok.encode(
            "Because of Zorblax.", add_special_tokens=False
        )
        ours = torch.tensor(
            sampler.compute_logprobs(ModelInput.from_ints(tokens)).result(timeout=120)[1:]
        )
    package = service.registry.path(saved.model_package_arn)
    merged = hf_model(package / "merged")
    assert not any("lora" in name for name, _ in merged.named_parameters())
    torch.testing.assert_close(token_logprobs(merged, tokens), ours, atol=1e-4, rtol=0)
    peft_model = PeftModel.from_pretrained(hf_model(smol_dir), str(package)).eval()
    torch.testing.assert_close(token_logprobs(peft_model, tokens), ours, atol=1e-4, rtol=0)
    with torch.no_grad():
        ids = torch.tensor([tokens])
        # W x + B (A x) and (W + B A) x round apart in fp32 by errors that scale with the
        # logits' size (~25 here), not each logit's own: 1e-5 of the largest, absolute
        unmerged, folded = peft_model(ids).logits, merged(ids).logits
        scale = float(folded.abs().max())
        torch.testing.assert_close(unmerged, folded, atol=1e-5 * scale, rtol=0)
    # The trained adapter really changed the model (the comparison above is not base vs base).
    assert (token_logprobs(hf_model(smol_dir), tokens) - ours).abs().max() > 1e-3
