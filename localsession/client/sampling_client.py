"""``SamplingClient``: the SDK's sampling surface over a ``Backend``.

Sampling ops carry no sequence number and run concurrently; the runtime's scheduler batches
them. Ownership follows the SDK (docs/wire.md#7): a client made by
``ServiceClient.create_sampling_client`` owns its session and stops it; one derived from a
``TrainingClient`` shares that client's handle and submit gate and only retires itself.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, TypeVar

from localsession import vocab
from localsession.client._handle import CLOSED_MESSAGE, BackgroundSubmitter, _SessionHandle
from localsession.client._inputs import model_input_token_count, prompt_to_model_input
from localsession.client._submit import submit
from localsession.exceptions import ResultMismatchError, TrainingSessionError
from localsession.futures import APIFuture
from localsession.types import SampleResponse, SamplingParams

_log = logging.getLogger("localsession.client")

_Out = TypeVar("_Out")


def _sample_of(body: Dict[str, Any]) -> SampleResponse:
    section = (body.get("operationResult") or {}).get(vocab.OpKind.SAMPLE.value)
    return SampleResponse._from_api(section or {})


def _logprobs_reader(tokens: Optional[int]) -> Callable[[Dict[str, Any]], List[Optional[float]]]:
    """Reads a computeLogprobs result, refusing one whose length is not the prompt's."""

    def read(body: Dict[str, Any]) -> List[Optional[float]]:
        section = (body.get("operationResult") or {}).get(vocab.OpKind.COMPUTE_LOGPROBS.value) or {}
        values: List[Optional[float]] = section.get("logprobs", [])
        if tokens is not None and tokens != len(values):
            raise ResultMismatchError(vocab.OpKind.COMPUTE_LOGPROBS.value, tokens, len(values))
        return values

    return read


class SamplingClient:
    """Samples from, and scores prompts against, one session's weights."""

    def __init__(
        self,
        training_session_name: str,
        runtime: Any,
        *,
        model_package_arn: str = "",
        base_model: str = "",
        tokenizer: Any = None,
        hub_client: Any = None,
        hf_model_id: Optional[str] = None,
        service_client: Any = None,
        session_handle: Optional[_SessionHandle] = None,
        submitter: Optional[BackgroundSubmitter] = None,
    ) -> None:
        self.training_session_name, self.model_package_arn = (
            training_session_name,
            model_package_arn,
        )
        self._runtime, self._service_client = runtime, service_client
        self._base_model, self._tokenizer = base_model, tokenizer
        self._hub_client, self._hf_model_id = hub_client, hf_model_id
        self._strict: bool = getattr(service_client, "_strict", True)
        # A client derived from a TrainingClient shares its session and submitter; one made
        # by ServiceClient.create_sampling_client owns both.
        self._owns_session, self._owns_submitter = session_handle is None, submitter is None
        self._submitter = (
            submitter
            if submitter is not None
            else BackgroundSubmitter(name=f"localsession-sampling-{training_session_name}")
        )
        self._handle = (
            session_handle
            if session_handle is not None
            else _SessionHandle(training_session_name, service_client)
        )
        self._closed = False

    def get_tokenizer(self) -> Any:
        """The session model's tokenizer, cached per client."""
        if self._tokenizer is None:  # loaded once, on first use
            self._tokenizer = self._runtime.in_process.get_tokenizer(self.training_session_name)
        loaded = self._tokenizer
        return loaded

    def sample(
        self,
        prompt: Any,
        num_samples: int = 1,
        sampling_params: "Optional[SamplingParams | Dict[str, Any] | Any]" = None,
        *,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: Optional[int] = None,
    ) -> APIFuture[SampleResponse]:
        """Generate ``num_samples`` completions of ``prompt``; returns a future at once."""
        chosen = SamplingParams() if sampling_params is None else sampling_params
        config: Dict[str, Any] = {
            "prompt": self._model_input(prompt),
            "numSamples": num_samples,  # the service answers 1 to 16
            "samplingParams": SamplingParams.from_any(chosen)._to_api(),
        }
        extras = {
            "modelPackageArn": self.model_package_arn or None,
            "includePromptLogprobs": True if include_prompt_logprobs else None,
            "topkPromptLogprobs": topk_prompt_logprobs,
        }
        config.update((k, v) for k, v in extras.items() if v is not None)
        return self._send({vocab.OpKind.SAMPLE.value: config}, _sample_of)

    async def sample_async(
        self,
        prompt: Any,
        num_samples: int = 1,
        sampling_params: "Optional[SamplingParams | Dict[str, Any] | Any]" = None,
        *,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: Optional[int] = None,
    ) -> SampleResponse:
        """Like :meth:`sample`, but awaits and returns the result (as the SDK does)."""
        pending = self.sample(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs=include_prompt_logprobs,
            topk_prompt_logprobs=topk_prompt_logprobs,
        )
        return await pending

    def compute_logprobs(self, prompt: Any) -> APIFuture[List[Optional[float]]]:
        """Score ``prompt``: one logprob per token, the first ``None``."""
        wire_prompt = self._model_input(prompt)
        config: Dict[str, Any] = {"prompt": wire_prompt}
        if self.model_package_arn:  # score with the package's weights
            config["modelPackageArn"] = self.model_package_arn
        reader = _logprobs_reader(model_input_token_count(wire_prompt))
        return self._send({vocab.OpKind.COMPUTE_LOGPROBS.value: config}, reader)

    async def compute_logprobs_async(self, prompt: Any) -> List[Optional[float]]:
        pending = self.compute_logprobs(prompt)
        return await pending

    def _model_input(self, prompt: Any) -> Dict[str, Any]:
        tok, load = self._tokenizer, self.get_tokenizer
        return prompt_to_model_input(prompt, tokenizer=tok, tokenizer_loader=load)

    def _send(
        self, config: Dict[str, Any], parse: Callable[[Dict[str, Any]], _Out]
    ) -> APIFuture[_Out]:
        if self._closed:  # retired or stopped: no new ops
            raise TrainingSessionError(CLOSED_MESSAGE)
        request = {"operationConfig": config}
        name, op = self.training_session_name, "ExecuteSamplingOperation"
        return submit(
            self._submitter,
            self._runtime,
            name,
            op,
            request,
            parse,
            strict=self._strict,
            keepalive=self._handle,
        )

    def _retire(self) -> None:
        self._closed = True
        if self._owns_submitter:  # a derived client shares its trainer's, which stays open
            self._submitter.close(timeout=5.0)

    def stop(self) -> None:
        """Retire this client; stop the session too if this client owns it."""
        self._retire()  # no new ops from here on
        owner = self._service_client if self._owns_session else None
        if owner is None:
            if self._owns_session is True:
                _log.warning(
                    "SamplingClient owns session %r but has no ServiceClient to stop it with; "
                    "stop it via ServiceClient.stop_session(...).",
                    self.training_session_name,
                )
            return
        try:
            owner.stop_session(self.training_session_name)
        except BaseException:  # the finalizer still tries later, without the warning
            self._handle.note_explicit_stop_failed()  # remembered for the finalizer
            raise
        self._handle.disarm()  # stopped: nothing left for the finalizer

    def __enter__(self) -> "SamplingClient":
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if not self._owns_session:  # a derived client only retires itself
            self._retire()  # the session stays with its TrainingClient
            return
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - leaving the block must not raise over the body
            _log.warning(
                "Failed to stop implicitly-created session %r on exit; it will be stopped "
                "when this client is collected, or after its inactivity timeout.",
                self.training_session_name,
                exc_info=True,
            )
