"""``--backend=tinker``: a Tinker-API server driven through the unmodified ``tinker`` SDK.

``--base-url URL`` (or ``TINKER_BASE_URL``) names anyone's server: SkyRL tx, TuFT, Tinker
itself or ``localsession serve``. Such a server declares **no** capabilities unless
``--capabilities`` says otherwise, and its API key comes from ``TINKER_API_KEY``. Without a
URL the backend starts localsession's own dialect on a loopback port (the
``localsession_tinker`` fixture's server) and declares localsession's decisions that the
Tinker surface can show.

Before any test runs, the backend asks the server for its models and creates one LoRA
training client on ``--base-model``. That probe does two things:

- **the model comes from the backend**: the prompt, its continuation, the EOS id and the
  decoder are the model's own tokenizer's (``TrainingClient.get_tokenizer``), so the suite
  works on any model the server serves;
- **a wire mismatch is one failure**: a server that refuses a field this SDK release sends
  (TuFT 0.2 and ``optimizer_config`` of tinker 0.38) stops the run with one message naming
  the SDK version and the field, instead of failing every test.

The releases tinker 0.16 to 0.38 are bridged by ``backends/tinker_compat.py``. Learning
rate and rank come from ``--learning-rate`` / ``--rank`` or a model-scaled default
(:func:`default_learning_rate`); tolerances from ``--numeric-stack`` (:data:`STACKS`).
``--heartbeat-timeout S`` declares the server's session expiry (a URL's), or starts the
loopback server with it; undeclared, the expiry test skips.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from conformance.adapter import Backend, BackendUnavailable, Limits
from conformance.backends import tinker_compat as compat
from conformance.backends.common import xfail_file

#: localsession's decisions that the Tinker-surface tests check (docs/semantics.md).
LOCAL_CAPABILITIES = frozenset(
    {
        "loss.outputs",
        "loss.stable_reinforce",
        "forward.bit_exact",
        "lora.zero_init",
        "sampling.reproducible_seeds",
        "sampling.stop_inclusive",
        "failure.isolated",
        "checkpoint.exact",
        "determinism",
    }
)
LOCAL_MODEL = "localsession/tiny"
#: The variable the loopback server reads its heartbeat timeout from (serve's flag's twin).
EXPIRY_ENV = "LOCALSESSION_HEARTBEAT_TIMEOUT"
#: The text the suite's inputs are made of, tokenized by the model's own tokenizer.
PROMPT_TEXT = "The capital of France is"
CONTINUATION_TEXT = " Paris, and the capital of Italy is Rome."

#: Tolerances per numeric stack: ``shared``, one engine computes training and sampling
#: logprobs (localsession, TuFT); ``split``, a separate sampler (vLLM, SGLang) beside the
#: trainer, whose kernels differ in the last bits and whose logprobs drift by ~1e-2.
STACKS: dict[str, dict[str, float]] = {
    "shared": {"logprob_atol": 1e-4, "logprob_mse": 1e-6, "loss_rtol": 1e-4},
    "split": {"logprob_atol": 5e-2, "logprob_mse": 1e-3, "loss_rtol": 1e-3},
}


def default_learning_rate(base_model: str) -> float:
    """A learning rate that moves a rank-4 adapter in a few steps without diverging: 1e-2
    on the random-init tiny models, 1e-3 on a pretrained model (at 1e-2 SmolLM2-135M's
    loss rises after its first step)."""
    return 1e-2 if base_model.startswith("localsession/tiny") else 1e-3


def make_tinker(options: dict[str, Any]) -> Backend:
    try:
        import tinker
    except ImportError as exc:
        raise BackendUnavailable(
            f"--backend=tinker needs the tinker SDK (pip install 'localsession[conformance]'): "
            f"{exc}"
        ) from None
    if options.get("lora_alpha") is not None:
        raise BackendUnavailable(
            "--lora-alpha does not apply to --backend=tinker: the Tinker API's LoraConfig has "
            "rank, seed and train_* only, and the server picks alpha; drop the option"
        )
    url = options.get("base_url") or os.environ.get("TINKER_BASE_URL")
    api_key = os.environ.get("TINKER_API_KEY")
    declared = options.get("capabilities")
    close: Callable[[], None] = lambda: None  # noqa: E731 - replaced when we own the server
    heartbeat_timeout: float | None = None  # a URL's comes from --heartbeat-timeout (limits.py)
    if url:
        capabilities = declared if declared is not None else frozenset()
        base_model = options.get("base_model")
        if not base_model:
            raise BackendUnavailable(
                "--backend=tinker --base-url URL needs --base-model NAME (a model the server "
                "lists in get_server_capabilities)"
            )
        name, stack = "tinker", options.get("numeric_stack") or "split"
        known = xfail_file("tinker")
    else:
        from localsession.mocking.hooks import scoped_environ
        from localsession.mocking.tinker_server import API_KEY, TinkerServer

        expiry = options.get("heartbeat_timeout")  # the loopback server expires with it
        with scoped_environ({EXPIRY_ENV: str(expiry)} if expiry else {}):
            server = TinkerServer(engine="torch")
        heartbeat_timeout = float(server.service.config.heartbeat_timeout) if expiry else None
        for key, value in server.environment().items():  # offline tokenizers for the SDK
            if key.startswith("HF_"):
                os.environ[key] = value
        url, api_key, close = server.url, API_KEY, server.close
        capabilities = declared if declared is not None else LOCAL_CAPABILITIES
        base_model = options.get("base_model") or LOCAL_MODEL
        name, stack = "tinker-localsession", options.get("numeric_stack") or "shared"
        known = xfail_file("tinker-localsession")
    if stack not in STACKS:
        close()
        raise BackendUnavailable(f"--numeric-stack={stack!r}: use {' or '.join(STACKS)}")
    api_key = api_key or "tml-conformance"  # the SDK wants a tml- key even where none is checked
    os.environ.setdefault("TINKER_API_KEY", api_key)  # for the SDK's low-level AsyncTinker
    version = compat.sdk_version()
    try:
        _reachable(str(url))
        listed = [m.model_name for m in compat.server_models(tinker, str(url), api_key)]
    except BackendUnavailable:
        close()
        raise
    except (AttributeError, TypeError, ImportError) as exc:  # the SDK, not the server
        close()
        raise BackendUnavailable(
            f"tinker {version} cannot ask {url} for its models: {exc}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any transport or HTTP error means unreachable
        close()
        if compat.status_of(exc) == 404:  # something serves HTTP, but not this SDK's calls
            where = getattr(getattr(exc, "request", None), "url", None) or "an endpoint"
            raise BackendUnavailable(
                f"wire mismatch: {url} answers 404 to {where}, which tinker {version} calls "
                "before any test; the server speaks another release of the Tinker API. Run the "
                "suite with a tinker SDK the server accepts (pip install 'tinker==X.Y.Z' in its "
                "own venv)."
            ) from None
        raise BackendUnavailable(
            f"no Tinker server answers at {url} (tinker {version}): {exc}"
        ) from None
    if base_model not in listed:
        close()
        raise BackendUnavailable(f"{url} does not list --base-model {base_model!r}: {listed}")

    def client() -> Any:
        return tinker.ServiceClient(base_url=url, api_key=api_key)

    rank = int(options.get("rank") or 4)
    try:
        model = _probe_model(tinker, client, str(base_model), rank, version, str(url))
    except BackendUnavailable:
        close()
        raise
    learning_rate = options.get("learning_rate") or default_learning_rate(str(base_model))
    tolerances = STACKS[stack]
    limits = Limits(
        min_max_tokens=1,
        rank=rank,
        learning_rate=float(learning_rate),
        logprob_atol=tolerances["logprob_atol"],
        logprob_mse=tolerances["logprob_mse"],
        loss_rtol=tolerances["loss_rtol"],
        heartbeat_timeout_s=heartbeat_timeout,
    )
    details = {"base_url": str(url), "base_model": str(base_model), "numeric_stack": stack}
    details.update(sdk=version, tokenizer=model["tokenizer"])
    return Backend(
        name=name,
        version=f"{url} via tinker {version}",
        ts=tinker,
        base_model=str(base_model),
        service_client=client,
        capabilities=frozenset(capabilities),
        limits=limits,
        surface="tinker",
        xfail_file=options.get("xfail_file") or known,
        close=close,
        details=details,
        prompt=model["prompt"],
        encode=model["encode"],
        decode=model["decode"],
        eos_token_id=model["eos"],
    )


def _reachable(url: str) -> None:
    """Fail fast when nothing listens (the SDK itself retries a refused connection)."""
    try:
        urllib.request.urlopen(url, timeout=10.0).close()
    except urllib.error.HTTPError:
        pass  # something answers HTTP: the SDK's probe says whether it is Tinker
    except (OSError, ValueError) as exc:
        raise BackendUnavailable(f"nothing answers at --base-url {url}: {exc}") from None


def _probe_model(
    tinker: Any, client: Callable[[], Any], base_model: str, rank: int, version: str, url: str
) -> dict[str, Any]:
    """Create one training client (the wire probe) and read the model's tokenizer."""
    sc = client()
    try:
        try:
            made = sc.create_lora_training_client(base_model, rank=rank, seed=0)
            tc = compat.resolve(made, 300.0)
        except Exception as exc:  # noqa: BLE001 - classified below
            field = compat.wire_refusal(exc)
            if field is not None:
                raise BackendUnavailable(
                    f"wire mismatch: {url} refuses the field {field!r} that tinker {version} "
                    f"sends when it creates a training client (HTTP {compat.status_of(exc)}); "
                    "the server speaks another release of the Tinker API. Run the suite with a "
                    "tinker SDK the server accepts (pip install 'tinker==X.Y.Z' in its own "
                    f"venv). No test ran. Server said: {str(exc)[:300]}"
                ) from None
            raise BackendUnavailable(
                f"{url} could not create a LoRA training client (rank {rank}) on {base_model!r} "
                f"with tinker {version}: {type(exc).__name__}: {str(exc)[:400]}"
            ) from None
        return _model_text(tc, base_model)
    finally:
        try:
            compat.end_session(sc, 60.0)
        except Exception:  # noqa: BLE001 - an older server without session close
            pass


def _model_text(tc: Any, base_model: str) -> dict[str, Any]:
    """Prompt, encoder, decoder and EOS from the model's tokenizer; the byte-level
    defaults (ids below 260, valid in any vocabulary) when it cannot be loaded."""
    try:
        tokenizer = tc.get_tokenizer()
        prompt = tuple(int(t) for t in tokenizer.encode(PROMPT_TEXT))
    except Exception as exc:  # noqa: BLE001 - offline, gated, or no tokenizer on this side
        byte_model = base_model.startswith("localsession/")
        return {
            "prompt": Backend.prompt,
            "encode": None,
            "decode": Backend.decode if byte_model else None,
            "eos": Backend.eos_token_id if byte_model else None,
            "tokenizer": f"unavailable ({type(exc).__name__}: {str(exc)[:120]}); byte prompt",
        }

    def encode(text: str) -> list[int]:
        return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]

    def decode(tokens: list[int]) -> str:
        return str(tokenizer.decode(tokens, skip_special_tokens=True))

    eos = tokenizer.eos_token_id
    return {
        "prompt": prompt,
        "encode": encode,
        "decode": decode,
        "eos": int(eos) if eos is not None else None,
        "tokenizer": type(tokenizer).__name__,
    }
