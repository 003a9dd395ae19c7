"""``--backend=tinker``: a Tinker-API server driven through the unmodified ``tinker`` SDK.

``--base-url URL`` (or ``TINKER_BASE_URL``) names anyone's server: SkyRL tx, TuFT, Tinker
itself or ``localsession serve``. Such a server declares **no** capabilities unless
``--capabilities`` says otherwise, and its API key comes from ``TINKER_API_KEY``. Without a
URL the backend starts localsession's own dialect on a loopback port (the
``localsession_tinker`` fixture's server) and declares localsession's decisions that the
Tinker surface can show.

Either way the backend's surface is ``tinker``: the SageMaker-only part of the suite (model
packages, Hub base models, S3 output, the ``sagemaker.train.training_session`` surface) is
skipped with its capability named, and ``suite_tinker/`` runs instead.
"""

from __future__ import annotations

import importlib.metadata
import os
import urllib.error
import urllib.request
from typing import Any

from conformance.adapter import Backend, BackendUnavailable, Limits
from conformance.backends.common import xfail_file

#: localsession's decisions that the Tinker-surface tests check (docs/semantics.md).
LOCAL_CAPABILITIES = frozenset(
    {
        "loss.outputs",
        "forward.bit_exact",
        "lora.zero_init",
        "lora.seeded_init",
        "sampling.reproducible_seeds",
        "sampling.stop_inclusive",
        "failure.isolated",
        "checkpoint.exact",
        "determinism",
    }
)
LOCAL_MODEL = "localsession/tiny"


def make_tinker(options: dict[str, Any]) -> Backend:
    try:
        import tinker
    except ImportError as exc:
        raise BackendUnavailable(
            f"--backend=tinker needs the tinker SDK (pip install 'localsession[tinker]'): {exc}"
        ) from None
    url = options.get("base_url") or os.environ.get("TINKER_BASE_URL")
    api_key = os.environ.get("TINKER_API_KEY")
    declared = options.get("capabilities")
    close: Any = lambda: None  # noqa: E731 - replaced when we own the server
    if url:
        capabilities = declared if declared is not None else frozenset()
        base_model = options.get("base_model")
        if not base_model:
            raise BackendUnavailable(
                "--backend=tinker --base-url URL needs --base-model NAME (a model the server "
                "lists in get_server_capabilities)"
            )
        name = "tinker"
    else:
        from localsession.mocking.tinker_server import API_KEY, TinkerServer

        server = TinkerServer(engine="torch")
        for key, value in server.environment().items():  # offline tokenizers for the SDK
            if key.startswith("HF_"):
                os.environ[key] = value
        url, api_key, close = server.url, API_KEY, server.close
        capabilities = declared if declared is not None else LOCAL_CAPABILITIES
        base_model = options.get("base_model") or LOCAL_MODEL
        name = "tinker-localsession"
    if not api_key:
        api_key = "tml-conformance"  # the SDK wants a tml- key even where none is checked

    def client() -> Any:
        return tinker.ServiceClient(base_url=url, api_key=api_key)

    try:  # fail fast when nothing listens (the SDK itself retries a refused connection)
        urllib.request.urlopen(str(url), timeout=10.0).close()
    except urllib.error.HTTPError:
        pass  # something answers HTTP: the SDK's probe below says whether it is Tinker
    except (OSError, ValueError) as exc:
        close()
        raise BackendUnavailable(f"nothing answers at --base-url {url}: {exc}") from None
    try:
        rest = tinker.RestClient(base_url=url, api_key=api_key)
        models = rest.get_server_capabilities().result(timeout=60.0).supported_models
    except Exception as exc:  # noqa: BLE001 - any transport or HTTP error means unreachable
        close()
        raise BackendUnavailable(f"no Tinker server answers at {url}: {exc}") from None
    listed = [m.model_name for m in models]
    if base_model not in listed:
        close()
        raise BackendUnavailable(f"{url} does not list --base-model {base_model!r}: {listed}")
    return Backend(
        name=name,
        version=f"{url} via tinker {importlib.metadata.version('tinker')}",
        ts=tinker,
        base_model=str(base_model),
        service_client=client,
        capabilities=frozenset(capabilities),
        limits=Limits(min_max_tokens=1, rank=4, learning_rate=1e-2),
        surface="tinker",
        xfail_file=options.get("xfail_file") or xfail_file("tinker"),
        close=close,
        details={"base_url": str(url), "base_model": str(base_model)},
    )
