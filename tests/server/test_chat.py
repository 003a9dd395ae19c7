"""Chat completions on a session: the real ``openai`` client, raw boto3 pass-through ops,
and the errors of both shapes. Every completion is checked against the same request made
through ``sample`` (same seed, same rendered prompt): one scheduler, one engine."""

from __future__ import annotations

import json
from typing import Any

import boto3
import openai
import pytest
from botocore.exceptions import ClientError

from localsession import ModelInput, SamplingParams, TrainingClient
from localsession import ServiceClient as LocalServiceClient

from .common import GROUP, ROLE, Running

MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture
def oai(server: Running) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def _prompt(tc: TrainingClient) -> list[int]:
    rendered = tc.get_tokenizer().apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True
    )
    return list(rendered["input_ids"] if "input_ids" in rendered else rendered)


def _reference(
    tc: TrainingClient, seed: int, n: int, stop: list[str], sampler: Any = None
) -> list[Any]:
    """The same request through ``sample`` (on ``sampler``, else on a fresh snapshot). The
    session never trains, so its saved weights are the base model's, which is what a chat
    request without a package samples."""
    sampler = sampler or tc.save_weights_and_get_sampling_client()
    result = sampler.sample(
        prompt=ModelInput.from_ints(_prompt(tc)),
        num_samples=n,
        sampling_params=SamplingParams(max_tokens=40, seed=seed, stop=stop),
    ).result()
    return list(result.sequences)


def _text(tc: TrainingClient, tokens: list[int], stop: list[str]) -> str:
    text = str(tc.get_tokenizer().decode(tokens, skip_special_tokens=True))
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


def test_openai_completion_matches_sample(session: TrainingClient, oai: Any) -> None:
    stop = ["a", "e"]
    response = oai.chat.completions.create(
        model=session.training_session_name,
        messages=MESSAGES,
        max_tokens=40,
        n=2,
        seed=5,
        stop=stop,
        logprobs=True,
    )
    reference = _reference(session, seed=5, n=2, stop=stop)
    assert len(response.choices) == 2
    for choice, seq in zip(response.choices, reference, strict=True):
        assert choice.finish_reason == ("stop" if seq.stop_reason == "stop" else "length")
        assert choice.message.content == _text(session, seq.tokens, stop)
        assert not any(s in choice.message.content for s in stop)
        assert [t.logprob for t in choice.logprobs.content] == pytest.approx(seq.logprobs)
    prompt_tokens = len(_prompt(session))
    assert response.usage.prompt_tokens == prompt_tokens
    assert response.usage.completion_tokens == sum(len(s.tokens) for s in reference)
    again = oai.chat.completions.create(
        model=session.training_session_name,
        messages=MESSAGES,
        max_tokens=40,
        n=2,
        seed=5,
        stop=stop,
    )
    assert [c.message.content for c in again.choices] == [
        c.message.content for c in response.choices
    ]  # seed reproducibility


def test_a_special_stop_string_ends_the_completion_at_its_token(
    session: TrainingClient, oai: Any
) -> None:
    # Specials decode to nothing, so "<|im_start|>" as text could never match; it stops at its
    # id (257), the step it is drawn. A seed whose stop-free sample draws 256 or 257 first:
    specials = {256: "<|endoftext|>", 257: "<|im_start|>"}
    sampler = session.save_weights_and_get_sampling_client()  # one snapshot for every seed
    for seed in range(200):
        (free,) = _reference(session, seed=seed, n=1, stop=[], sampler=sampler)
        cut = next((i for i, t in enumerate(free.tokens) if t in specials), None)
        if cut is not None:
            break
    else:
        pytest.fail("no seed in 200 drew <|endoftext|> or <|im_start|> within 40 tokens")
    response = oai.chat.completions.create(
        model=session.training_session_name,
        messages=MESSAGES,
        max_tokens=40,
        seed=seed,
        stop=[specials[free.tokens[cut]]],
        logprobs=True,
    )
    (choice,) = response.choices
    assert response.usage.completion_tokens == cut + 1  # the stop token is the last one
    assert choice.finish_reason == "stop"
    assert [t.logprob for t in choice.logprobs.content] == pytest.approx(free.logprobs[: cut + 1])


def test_openai_stream_carries_the_same_content(session: TrainingClient, oai: Any) -> None:
    kwargs: dict[str, Any] = {
        "model": session.training_session_name,
        "messages": MESSAGES,
        "max_tokens": 30,
        "seed": 9,
    }
    whole = oai.chat.completions.create(**kwargs)
    chunks = list(
        oai.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert text == whole.choices[0].message.content
    assert finish == [whole.choices[0].finish_reason]
    assert chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_top_logprobs_rank_the_model_distribution(session: TrainingClient, oai: Any) -> None:
    response = oai.chat.completions.create(
        model=session.training_session_name,
        messages=MESSAGES,
        max_tokens=10,
        seed=1,
        logprobs=True,
        top_logprobs=3,
    )
    for position in response.choices[0].logprobs.content:
        tops = [t.logprob for t in position.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        # At T = 1 the chosen token's logprob is in the same distribution as the top list.
        assert position.logprob <= tops[0] + 1e-5


def test_models_lists_sessions_and_packages(session: TrainingClient, oai: Any) -> None:
    arn = session.save_weights_for_sampler("chat").result().model_package_arn
    ids = [m.id for m in oai.models.list()]
    assert session.training_session_name in ids and arn in ids
    by_arn = oai.chat.completions.create(model=arn, messages=MESSAGES, max_tokens=5, seed=2)
    assert by_arn.choices[0].finish_reason in ("stop", "length")


def test_boto3_pass_through_ops_read_the_same_content(
    server: Running, session: TrainingClient, oai: Any, sdk_env: Any
) -> None:
    sdk_env(server)
    runtime = boto3.client("sagemakertrainingsessionruntime")
    body = {"messages": MESSAGES, "max_tokens": 30, "seed": 4}
    expected = oai.chat.completions.create(model=session.training_session_name, **body)
    plain = runtime.sample_training_session(
        trainingSessionName=session.training_session_name,
        body=json.dumps(body).encode(),
        contentType="application/json",
        accept="application/json",
    )
    assert json.loads(plain["body"].read())["choices"][0]["message"]["content"] == (
        expected.choices[0].message.content
    )
    streamed = runtime.sample_training_session_with_response_stream(
        trainingSessionName=session.training_session_name,
        body=json.dumps(body).encode(),
        contentType="application/json",
    )
    events = [
        line[len("data: ") :]
        for line in streamed["body"].read().decode().splitlines()
        if line.startswith("data: ")
    ]
    assert events[-1] == "[DONE]"
    text = "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in map(json.loads, events[:-1])
        if c["choices"]
    )
    assert text == expected.choices[0].message.content


def test_usage_is_counted_on_the_session(
    server: Running, session: TrainingClient, oai: Any
) -> None:
    def usage() -> dict[str, int]:
        detail = server.service.describe_training_session(
            {"TrainingSessionName": session.training_session_name}
        )["TrainingSessionDetail"]
        return dict(detail["BillableTokenUsage"])

    before = usage()
    response = oai.chat.completions.create(
        model=session.training_session_name, messages=MESSAGES, max_tokens=12, n=2, seed=8
    )
    after = usage()
    assert (
        after["SampleTokenCount"] - before["SampleTokenCount"] == response.usage.completion_tokens
    )
    assert (
        after["PrefillTokenCount"] - before["PrefillTokenCount"] == 2 * response.usage.prompt_tokens
    )


def test_errors_in_both_shapes(
    server: Running, session: TrainingClient, oai: Any, sdk_env: Any
) -> None:
    sdk_env(server)
    runtime = boto3.client("sagemakertrainingsessionruntime")
    local = LocalServiceClient(role_arn=ROLE, backend=server.service, model_package_group_arn=GROUP)
    stopped = local.create_lora_training_client("localsession/tiny", rank=4)
    stopped.stop()
    name = stopped.training_session_name
    with pytest.raises(openai.ConflictError) as conflict:
        oai.chat.completions.create(model=name, messages=MESSAGES)
    assert conflict.value.body["code"] == "ConflictException"
    with pytest.raises(ClientError) as aws_conflict:
        runtime.sample_training_session(trainingSessionName=name, body=b'{"messages": []}')
    assert aws_conflict.value.response["Error"]["Code"] == "ConflictException"
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="no-such-session", messages=MESSAGES)
    with pytest.raises(ClientError) as aws_missing:
        runtime.sample_training_session(trainingSessionName="no-such-session", body=b"{}")
    assert aws_missing.value.response["Error"]["Code"] == "ResourceNotFoundException"
    with pytest.raises(ClientError) as aws_bad:
        runtime.sample_training_session(trainingSessionName=name, body=b"{not json")
    assert aws_bad.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(openai.BadRequestError) as unsupported:
        oai.chat.completions.create(
            model=session.training_session_name,
            messages=MESSAGES,
            response_format={"type": "json_object"},
        )
    assert unsupported.value.body["type"] == "invalid_request_error"
    assert "response_format" in unsupported.value.body["message"]
