"""``SamplingClient``: the SDK's sampling surface over a ``Backend``.

Sampling ops carry no sequence number and run concurrently; the runtime's scheduler batches
them. Ownership follows the SDK (sagemaker-sdk.md §9): a client made by
``ServiceClient.create_sampling_client`` owns its session and stops it; one derived from a
``TrainingClient`` shares that client's handle and submit gate and only retires itself.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, TypeVar

from localsession.client._handle import CLOSED_MESSAGE, BackgroundSubmitter, _SessionHandle
from localsession.client._inputs import model_input_token_count, prompt_to_model_input
from localsession.client._submit import submit
from localsession.exceptions import ResultMismatchError, TrainingSessionError
from localsession.futures import APIFuture
from localsession.types import SampleResponse, SamplingParams

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


def _parse_sample_result(raw: Dict[str, Any]) -> SampleResponse:
    operation_result = raw.get("operationResult") or {}
    return SampleResponse._from_api(operation_result.get("sample") or {})


def _make_compute_logprobs_parser(
    expected_tokens: Optional[int],
) -> Callable[[Dict[str, Any]], List[Optional[float]]]:
    def parse(raw: Dict[str, Any]) -> List[Optional[float]]:
        operation_result = raw.get("operationResult") or {}
        logprobs: List[Optional[float]] = (operation_result.get("computeLogprobs") or {}).get(
            "logprobs", []
        )
        if expected_tokens is not None and len(logprobs) != expected_tokens:
            raise ResultMismatchError("computeLogprobs", expected_tokens, len(logprobs))
        return logprobs

    return parse


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
        self.training_session_name = training_session_name
        self.model_package_arn = model_package_arn
        self._runtime = runtime
        self._base_model = base_model
        self._tokenizer = tokenizer
        self._hub_client = hub_client
        self._hf_model_id = hf_model_id
        self._service_client = service_client
        self._strict: bool = getattr(service_client, "_strict", True)
        self._owns_session = session_handle is None
        self._owns_submitter = submitter is None
        self._submitter = submitter or BackgroundSubmitter(
            name=f"localsession-sampling-{training_session_name}"
        )
        self._handle = session_handle or _SessionHandle(training_session_name, service_client)
        self._closed = False

    def get_tokenizer(self) -> Any:
        """The session model's tokenizer, cached per client."""
        if self._tokenizer is None:
            self._tokenizer = self._runtime.get_tokenizer(self.training_session_name)
        return self._tokenizer

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
        params = (
            SamplingParams.from_any(sampling_params)
            if sampling_params is not None
            else SamplingParams()
        )
        model_input = prompt_to_model_input(
            prompt, tokenizer=self._tokenizer, tokenizer_loader=self.get_tokenizer
        )
        sample_config: Dict[str, Any] = {
            "prompt": model_input,
            "numSamples": num_samples,
            "samplingParams": params._to_api(),
        }
        if self.model_package_arn:
            sample_config["modelPackageArn"] = self.model_package_arn
        if include_prompt_logprobs:
            sample_config["includePromptLogprobs"] = True
        if topk_prompt_logprobs is not None:
            sample_config["topkPromptLogprobs"] = topk_prompt_logprobs
        return self._submit_sample_op({"sample": sample_config}, _parse_sample_result)

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
        return await self.sample(
            prompt,
            num_samples=num_samples,
            sampling_params=sampling_params,
            include_prompt_logprobs=include_prompt_logprobs,
            topk_prompt_logprobs=topk_prompt_logprobs,
        )

    def compute_logprobs(self, prompt: Any) -> APIFuture[List[Optional[float]]]:
        """Score ``prompt``: one logprob per token, the first ``None``."""
        model_input = prompt_to_model_input(
            prompt, tokenizer=self._tokenizer, tokenizer_loader=self.get_tokenizer
        )
        logprobs_config: Dict[str, Any] = {"prompt": model_input}
        if self.model_package_arn:
            logprobs_config["modelPackageArn"] = self.model_package_arn
        return self._submit_sample_op(
            {"computeLogprobs": logprobs_config},
            _make_compute_logprobs_parser(model_input_token_count(model_input)),
        )

    async def compute_logprobs_async(self, prompt: Any) -> List[Optional[float]]:
        return await self.compute_logprobs(prompt)

    def _submit_sample_op(
        self,
        operation_config: Dict[str, Any],
        parse_fn: Callable[[Dict[str, Any]], _T],
    ) -> APIFuture[_T]:
        if self._closed:
            raise TrainingSessionError(CLOSED_MESSAGE)
        return submit(
            self._submitter,
            self._runtime,
            self.training_session_name,
            "ExecuteSamplingOperation",
            {"operationConfig": operation_config},
            parse_fn,
            strict=self._strict,
            keepalive=self._handle,
        )

    def _retire(self) -> None:
        self._closed = True
        if self._owns_submitter:
            self._submitter.close()

    def stop(self) -> None:
        """Retire this client; stop the session too if this client owns it."""
        self._retire()
        if not self._owns_session:
            return
        if self._service_client is None:
            logger.warning(
                "SamplingClient owns session %r but has no ServiceClient to "
                "stop it with; stop it via ServiceClient.stop_session(...).",
                self.training_session_name,
            )
            return
        try:
            self._service_client.stop_session(self.training_session_name)
        except Exception:
            self._handle.note_explicit_stop_failed()
            raise
        self._handle.disarm()

    def __enter__(self) -> "SamplingClient":
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if self._owns_session:
            try:
                self.stop()
            except Exception:
                logger.warning(
                    "Failed to stop implicitly-created session %r on exit; it "
                    "will be stopped when this client is collected, or after "
                    "its inactivity timeout.",
                    self.training_session_name,
                    exc_info=True,
                )
        else:
            self._retire()
