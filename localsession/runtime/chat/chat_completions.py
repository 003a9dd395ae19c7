"""OpenAI chat completions over running sessions (SampleTrainingSession, /v1/chat/completions).

:class:`Completions` checks a request and renders its prompt (``prepare``), then samples it
whole (``run``) or streamed (``stream``). Sampling goes through the service's scheduler, so it
is batched with ``sample`` ops and counted in the session's usage. The request format itself
lives in runtime/chat/protocol.py; this module binds it to sessions and weights.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from localsession import vocab
from localsession.port import SampleRequest
from localsession.port_results import SampleResult
from localsession.runtime import errors
from localsession.runtime.chat import protocol, streaming, text_completion
from localsession.runtime.packages.registry import Registry
from localsession.runtime.sessions import stops
from localsession.runtime.sessions.lifecycle import Session
from localsession.runtime.sessions.operations import Operation
from localsession.runtime.sessions.package_fit import PackageMismatch, compatible_package
from localsession.runtime.sessions.scheduler import SamplingScheduler, make_job


class SessionsView(Protocol):
    """What chat completions need of the service that holds the sessions."""

    @property
    def scheduler(self) -> SamplingScheduler: ...

    @property
    def registry(self) -> Registry: ...

    def session(self, name: str) -> Session: ...

    def sessions(self) -> list[Session]: ...

    def sampling_weights(self, session: Session, arn: str | None) -> str | None: ...

    def get_tokenizer(self, name: str) -> Any: ...


@dataclass
class PreparedChat:
    """A checked chat request, bound to the session and weights that will sample it."""

    request: protocol.ChatRequest
    target: str
    session: Session
    weights: str | None
    tokenizer: Any
    prompt: list[int]
    #: the ids of the stop strings that are one special token each (runtime/sessions/stops.py)
    stop_ids: tuple[int, ...]
    #: a text completion (``/completions``): answered in the ``text_completion`` shapes
    text: bool = False


def chat_text(tokenizer: Any, tokens: list[int], stop: tuple[str, ...]) -> str:
    """A completion's text: special tokens dropped, cut before the first stop string
    (OpenAI returns the text without the stop sequence; the tokens keep it)."""
    text = str(tokenizer.decode(tokens, skip_special_tokens=True))
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


class Completions:
    """Chat completions sampled by a service's sessions."""

    def __init__(self, service: SessionsView) -> None:
        self.service = service

    def prepare(
        self, target: str, body: dict[str, Any], *, model_package: str | None = None
    ) -> PreparedChat:
        """Check an OpenAI chat-completions request and render its prompt (no sampling yet).

        ``target`` is a session name or a model-package ARN (then any running session that
        can load it samples it); ``model_package`` (the ``X-Amzn-SageMaker-Model-Package``
        header) picks a checkpoint of the named session. Refusals raise here, before a
        response (or a stream) starts.
        """
        session, weights = self._target(target, model_package)
        request = protocol.parse_request(body)
        tokenizer = self.service.get_tokenizer(session.name)
        encoded = tokenizer.apply_chat_template(
            request.messages, tools=request.tools, add_generation_prompt=True, tokenize=True
        )
        prompt = [int(t) for t in (encoded["input_ids"] if "input_ids" in encoded else encoded)]
        stop_ids = stops.stop_token_ids((), request.stop, tokenizer)
        return PreparedChat(request, target, session, weights, tokenizer, prompt, stop_ids)

    def prepare_text(
        self, target: str, body: dict[str, Any], *, model_package: str | None = None
    ) -> PreparedChat:
        """Check an OpenAI text-completions request (runtime/chat/text_completion.py) and
        tokenize its prompt as is, without a chat template; sampled by :meth:`run` and
        :meth:`stream` like a chat request."""
        session, weights = self._target(target, model_package)
        request, text = text_completion.parse_request(body)
        tokenizer = self.service.get_tokenizer(session.name)
        prompt = [int(t) for t in tokenizer.encode(text)] if isinstance(text, str) else text
        stop_ids = stops.stop_token_ids((), request.stop, tokenizer)
        return PreparedChat(request, target, session, weights, tokenizer, prompt, stop_ids, True)

    def run(self, prepared: PreparedChat) -> dict[str, Any]:
        """Sample a prepared chat request (blocking) and return the ``chat.completion`` body."""
        request, session, weights = prepared.request, prepared.session, prepared.weights
        tokenizer, prompt = prepared.tokenizer, prepared.prompt
        sample = protocol.sample_request(request, prompt, stop_token_ids=prepared.stop_ids)
        sampled = self._sample_now(session, weights, sample)
        sequences = sampled.sequences
        tops: list[list[list[tuple[str, float]]] | None] = [None] * len(sequences)
        if request.top_logprobs:
            decode_one = lambda t: tokenizer.decode([t])  # noqa: E731
            for i, seq in enumerate(sequences):
                scored = self._sample_now(
                    session,
                    weights,
                    SampleRequest(
                        prompt=prompt + seq.tokens,
                        max_tokens=1,
                        temperature=0.0,
                        topk_prompt_logprobs=request.top_logprobs,
                    ),
                ).topk_prompt_logprobs
                tops[i] = [
                    [(decode_one(a.token_id), float(a.logprob)) for a in position]
                    for position in (scored or [])[len(prompt) :]
                ]
        choices = [
            protocol.Choice(
                text=chat_text(tokenizer, seq.tokens, request.stop),
                finish_reason=seq.stop_reason,
                tokens=seq.tokens,
                logprobs=seq.logprobs,
                top=top,
            )
            for seq, top in zip(sequences, tops, strict=True)
        ]
        decode = lambda ids: tokenizer.decode(ids)  # noqa: E731
        body = protocol.completion(request, prepared.target, choices, len(prompt), decode)
        return text_completion.completion(body) if prepared.text else body

    def stream(self, prepared: PreparedChat) -> Iterator[dict[str, Any]]:
        """``chat.completion.chunk`` bodies for a prepared request (``text_completion`` ones
        for a text request), sent as tokens are decoded (runtime/chat/streaming.py); batched
        and counted like :meth:`run`."""
        if prepared.text:
            stream_id = f"cmpl-{uuid.uuid4().hex}"
            chat = dataclasses.replace(prepared, text=False)
            for event in self.stream(chat):
                if (out := text_completion.chunk(event, stream_id)) is not None:
                    yield out
            return
        # top_logprobs need a scoring pass after generation, and a reply that offers tools
        # is parsed for tool calls once it is whole: both are sent when generation ends.
        if prepared.request.top_logprobs or prepared.request.tools:
            yield from protocol.chunks(self.run(prepared), prepared.request)
            return

        def submit(request: SampleRequest) -> Operation:
            op = Operation(kind=vocab.OpKind.SAMPLE, id=str(uuid.uuid4()))
            job = make_job(prepared.session, op, prepared.weights, request, request.prompt)
            self.service.scheduler.submit(job)
            return op

        yield from streaming.stream_chat(submit, prepared, chat_text)

    def models(self) -> list[dict[str, Any]]:
        """``/v1/models``: the running sessions, then every model package, newest first."""
        sessions = [s for s in self.service.sessions() if s.status in vocab.SESSION_ACTIVE]
        rows = [
            {
                "id": s.name,
                "object": "model",
                "created": int(s.creation_time.timestamp()),
                "owned_by": "localsession",
            }
            for s in sessions
        ]
        registry = self.service.registry
        for group in registry.groups():
            rows += [
                {
                    "id": p.arn,
                    "object": "model",
                    "created": int(p.created().timestamp()),
                    "owned_by": "localsession",
                }
                for p in registry.list(group)
            ]
        return rows

    def _target(self, target: str, model_package: str | None) -> tuple[Session, str | None]:
        """The session that samples a chat request, and which weights it reads."""
        if not target.startswith("arn:"):
            session = self.service.session(target)
            session.require_accepting()
            return session, self.service.sampling_weights(session, model_package)
        running = [s for s in self.service.sessions() if s.status in vocab.SESSION_ACTIVE]
        problems = []
        for session in running:
            try:
                return session, str(compatible_package(session, target))
            except (PackageMismatch, errors.ServiceError) as exc:
                problems.append(str(exc))
        raise errors.not_found(
            f"No running session can sample model package {target}: start a session on its "
            "base model with its LoRA rank, or name a session as the model."
            + (f" ({problems[0]})" if problems else ""),
            runtime=True,
        )

    def _sample_now(
        self, session: Session, weights: str | None, request: SampleRequest
    ) -> SampleResult:
        """Run one sample request through the scheduler and wait for its result."""
        op = Operation(kind=vocab.OpKind.SAMPLE, id=str(uuid.uuid4()))
        self.service.scheduler.submit(make_job(session, op, weights, request, request.prompt))
        op.done.wait()
        if op.status != vocab.OpStatus.COMPLETED or not isinstance(op.result, SampleResult):
            raise errors.validation(f"sampling failed: {op.error}")
        return op.result
