"""Which base models a Tinker client may name, refused in Tinker words.

The runtime's own refusal speaks the SageMaker dialect ("ModelConfig.BaseModelArn ... use a
Hub content ARN or name from ListHubContents"); a tinker SDK user names a ``base_model`` and
needs the served models and the ``serve`` option that adds one.
"""

from __future__ import annotations

from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service


def check_served(service: Service, base_model: str) -> None:
    """Raise a ``ValidationException`` (HTTP 400) naming the served models and
    ``--model-map`` unless ``base_model`` is one this server trains and samples."""
    catalog = service.catalog
    names = catalog.names()
    if catalog.canonical_name(base_model) in {catalog.canonical_name(n) for n in names}:
        return
    if service.config.local_model_paths:  # in-process and mock(): any resolvable name
        try:
            catalog.resolve(base_model)
            return
        except ValueError:
            pass
    raise unknown_model(base_model, names)


def unknown_model(base_model: str, served: list[str]) -> ServiceError:
    shown = base_model[:200]
    return errors.validation(
        f"base_model {shown!r} is not served here. Served models: {', '.join(served)} "
        "(tinker.RestClient().get_server_capabilities() lists them). To use this name, restart "
        f"the server with `localsession serve --model-map {shown}=TARGET`, TARGET being a built-in "
        "such as localsession/tiny, a model directory, a .gguf file or a model in the local "
        "Hugging Face cache."
    )
