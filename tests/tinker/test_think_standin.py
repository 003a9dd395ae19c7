"""``localsession/tiny-think`` as an offline stand-in for the Qwen3.5 family: served under a
Qwen3.5 name with the model map, its tokenizer (the one ``serve`` exports for
``get_tokenizer``) has ``<think>`` and ``</think>`` as single tokens, so tinker-cookbook
0.6.1's ``qwen3_5`` renderer builds prompts and parses replies, and the model trains and
samples on them through the unmodified tinker SDK.
"""

from __future__ import annotations

from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
renderers = pytest.importorskip("tinker_cookbook.renderers")
types = tinker.types

QWEN = "Qwen/Qwen3.5-4B"
MAP = {QWEN: "localsession/tiny-think"}


@pytest.mark.localsession_tinker(model_map=MAP)
def test_the_qwen3_5_renderer_runs_on_the_mapped_stand_in(localsession_tinker: Any) -> None:
    from tinker_cookbook.model_info import get_recommended_renderer_name
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    name = get_recommended_renderer_name(QWEN)
    assert name == "qwen3_5"
    tok = get_tokenizer(QWEN)  # from serve's exported HF cache, before any client exists
    assert tok.encode("<think>", add_special_tokens=False) == [259]
    assert tok.encode("</think>", add_special_tokens=False) == [260]
    assert tok.decode([259, 104, 105, 260]) == "<think>hi</think>"  # not dropped as special
    renderer = renderers.get_renderer(name, tok)
    convo = [{"role": "user", "content": "2+2?"}]
    prompt = renderer.build_generation_prompt(convo).to_ints()
    # <|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n, token by token
    expected = [257, *b"user\n2+2?", 258, 10, 257, *b"assistant\n", 259, 10]
    assert prompt[-len(expected) :] == expected
    reply = [*b"add them", 10, 260, 10, 10, *b"4", 258]
    message, _ = renderer.parse_response(reply)
    parts = message["content"]
    assert [p["type"] for p in parts] == ["thinking", "text"]
    assert parts[0]["thinking"] == "add them" and parts[1]["text"] == "4"

    # the stand-in trains and samples on what the renderer makes (vocabulary 261)
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model=QWEN, rank=4, seed=0).result()
    assert tc.get_tokenizer().encode("</think>", add_special_tokens=False) == [260]
    example, weights = renderer.build_supervised_example(
        [*convo, {"role": "assistant", "content": "4"}]
    )
    ids = example.to_ints()
    assert 259 in ids and 260 in ids  # the empty think block Qwen3.5 writes before a reply
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": weights[1:].tolist()},
    )
    out = tc.forward_backward([datum], "cross_entropy").result()
    assert out.metrics["loss:sum"] > 0
    sampler = tc.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=6, seed=0, stop=renderer.get_stop_sequences())
    seq = sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result().sequences[0]
    assert all(0 <= t < 261 for t in seq.tokens)
    renderer.parse_response(seq.tokens)  # whatever the tiny model wrote, it parses
