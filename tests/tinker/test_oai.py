"""Tinker's OpenAI-compatible surface, ``{base}/oai/api/v1``, through the real ``openai``
client: models named as Tinker names them (a base model id, a ``tinker://.../sampler_weights``
path, ``base;path``), ``/chat/completions`` and ``/completions``, streamed and not.

Each answer is checked against the tinker SDK's own ``SamplingClient`` on the same weights:
greedy decoding must give the same tokens, so the OpenAI path reads the weights it names.
"""

from __future__ import annotations

from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
openai = pytest.importorskip("openai")
types = tinker.types

BASE = "localsession/tiny"
TEXT = "abcabcabcabcabcabc"


def _client(server: Any) -> Any:
    return openai.OpenAI(
        base_url=f"{server.url}/oai/api/v1", api_key="tml-localsession", max_retries=0
    )


@pytest.fixture(scope="module")
def trained(localsession_tinker_module: Any) -> tuple[Any, str, Any]:
    """(the server, a sampler checkpoint's path, the tokenizer): a model trained until its
    greedy continuation of ``TEXT`` differs from the base model's."""
    server = localsession_tinker_module
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model=BASE, rank=8, seed=0).result()
    tok = tc.get_tokenizer()
    ids = tok.encode(TEXT)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:]},
    )
    for _ in range(12):
        tc.forward_backward([datum], "cross_entropy").result()
        tc.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    path = tc.save_weights_for_sampler("oai-test").result().path
    tc.save_state("oai-train").result()  # a training checkpoint: not listed as a model
    return server, path, tok


@pytest.fixture(scope="module")
def localsession_tinker_module() -> Any:
    from localsession.mocking.hooks import scoped_environ
    from localsession.mocking.tinker_server import shared

    server = shared("torch")
    with scoped_environ(server.environment()):
        yield server


def _sdk_greedy(prompt: list[int], max_tokens: int, **where: Any) -> Any:
    sampler = tinker.ServiceClient().create_sampling_client(**where).result()
    params = types.SamplingParams(max_tokens=max_tokens, temperature=0.0)
    return sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result().sequences[0]


def test_models_lists_base_models_and_sampler_checkpoints(trained: tuple[Any, str, Any]) -> None:
    server, path, _ = trained
    ids = [m.id for m in _client(server).models.list()]
    assert BASE in ids and path in ids
    assert path.replace("/sampler_weights/oai-test", "/weights/oai-train") not in ids


def test_completions_on_a_checkpoint_match_the_sdk_sampler(trained: tuple[Any, str, Any]) -> None:
    server, path, tok = trained
    prompt = tok.encode("abcab")
    client = _client(server)
    for model in (path, f"{BASE};{path}"):
        answer = client.completions.create(
            model=model, prompt=prompt, max_tokens=6, temperature=0.0, logprobs=1
        )
        assert answer.model == model
        expected = _sdk_greedy(prompt, 6, model_path=path)
        choice = answer.choices[0]
        assert choice.text == tok.decode(expected.tokens, skip_special_tokens=True)
        assert choice.logprobs.token_logprobs == pytest.approx(expected.logprobs, abs=1e-5)
        assert answer.usage.prompt_tokens == len(prompt)
        assert answer.usage.completion_tokens == len(expected.tokens)
    base = client.completions.create(model=BASE, prompt="abcab", max_tokens=6, temperature=0.0)
    on_base = _sdk_greedy(prompt, 6, base_model=BASE)
    assert base.choices[0].text == tok.decode(on_base.tokens, skip_special_tokens=True)
    assert base.choices[0].text != choice.text  # the checkpoint's weights were read


def test_chat_streamed_and_not_agree_with_the_sdk(trained: tuple[Any, str, Any]) -> None:
    server, path, tok = trained
    client = _client(server)
    messages = [{"role": "user", "content": "abc"}]
    whole = client.chat.completions.create(
        model=path, messages=messages, max_tokens=8, temperature=0.0
    )
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    prompt = list(prompt["input_ids"] if "input_ids" in prompt else prompt)
    expected = _sdk_greedy(prompt, 8, model_path=path)
    text = tok.decode(expected.tokens, skip_special_tokens=True)
    assert whole.choices[0].message.content == text
    assert whole.model == path
    stream = client.chat.completions.create(
        model=path, messages=messages, max_tokens=8, temperature=0.0, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    streamed = client.completions.create(
        model=BASE, prompt="abcab", max_tokens=5, temperature=0.0, stream=True
    )
    pieces = [c.choices[0].text for c in streamed if c.choices]
    flat = client.completions.create(model=BASE, prompt="abcab", max_tokens=5, temperature=0.0)
    assert "".join(pieces) == flat.choices[0].text


def test_refusals_name_the_problem(trained: tuple[Any, str, Any]) -> None:
    server, path, _ = trained
    client = _client(server)
    with pytest.raises(openai.NotFoundError, match="no/such-model"):
        client.completions.create(model="no/such-model", prompt="a", max_tokens=1)
    missing = path.rsplit("/", 1)[0] + "/never-saved"
    with pytest.raises(openai.NotFoundError, match="never-saved"):
        client.completions.create(model=missing, prompt="a", max_tokens=1)
    training = path.replace("/sampler_weights/", "/weights/")
    with pytest.raises(openai.BadRequestError, match="not a sampler checkpoint"):
        client.completions.create(model=training, prompt="a", max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="was trained on"):
        client.completions.create(model=f"acme/other;{path}", prompt="a", max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="several prompts"):
        client.completions.create(model=BASE, prompt=["a", "b"], max_tokens=1)
