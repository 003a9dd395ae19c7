"""What differs between the tinker SDK releases the suite runs under (0.16 to 0.38).

The suite calls the SDK only through its public clients; the few places where releases
differ go through here, so one test body runs under every release:

- :func:`server_models`: the server's catalog (``tinker.RestClient`` where the SDK has
  it, else the ``ServiceClient``'s older ``get_server_capabilities``);
- :func:`rest_client`: the checkpoint REST surface (``ServiceClient.create_rest_client``);
- :func:`supports`: whether this SDK can express a feature at all (a keyword of
  ``SamplingClient.sample``, a ``LossFnType``, a ``TrainingClient`` method), so a test of a
  feature the installed SDK cannot send is skipped naming the installed release and the one
  that added the feature (:data:`ADDED_IN`), not failed;
- :func:`wire_refusal`: the field a server refused, read from an SDK error, for the one
  clear message a wire mismatch gets (backends/tinker.py).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import re
import typing
from types import ModuleType
from typing import Any


def resolve(answer: Any, timeout: float) -> Any:
    """``answer.result(timeout)`` for a future; older releases answer some calls
    (``create_lora_training_client`` before 0.30) with the value itself."""
    return answer.result(timeout) if hasattr(answer, "result") else answer


def sdk_version() -> str:
    """The installed tinker distribution's version (``0.38.0``)."""
    return importlib.metadata.version("tinker")


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.28.1"`` -> ``(0, 28, 1)``; a pre-release tail is dropped."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def server_models(tinker: ModuleType, url: str, api_key: str) -> list[Any]:
    """``get_server_capabilities().supported_models``: through ``tinker.RestClient`` (0.30
    and later), else through a ``ServiceClient`` (older releases), closed after."""
    rest = getattr(tinker, "RestClient", None)
    if rest is not None:
        answer = rest(base_url=url, api_key=api_key).get_server_capabilities().result(60.0)
        return list(answer.supported_models)
    client = tinker.ServiceClient(base_url=url, api_key=api_key)
    try:
        return list(resolve(client.get_server_capabilities(), 60.0).supported_models)
    finally:
        close = getattr(client, "close", None)
        if close is not None:
            try:
                resolve(close(), 30.0)
            except Exception:  # noqa: BLE001 - a release without sessions to close
                pass


def low_level_client(tinker: ModuleType, url: str) -> Any:
    """The SDK's generated ``AsyncTinker`` client (one call per wire endpoint), whose key
    comes from ``TINKER_API_KEY``; it lives in ``tinker._client`` in every release."""
    from importlib import import_module

    return import_module(f"{tinker.__name__}._client").AsyncTinker(base_url=url)


def rest_client(service_client: Any) -> Any:
    """The REST client for checkpoints and training runs of ``service_client``."""
    return service_client.create_rest_client()


def _rest_class(tinker: ModuleType) -> Any:
    """``RestClient``: exported at the top level from 0.30, in its module before."""
    from importlib import import_module

    found = getattr(tinker, "RestClient", None)
    if found is None:
        module = import_module(f"{tinker.__name__}.lib.public_interfaces.rest_client")
        found = module.RestClient
    return found


def _sample_keywords(tinker: ModuleType) -> set[str]:
    return set(inspect.signature(tinker.SamplingClient.sample).parameters)


def _loss_names(tinker: ModuleType) -> set[str]:
    return set(typing.get_args(tinker.types.LossFnType))


#: The first tinker release whose public clients can send each feature a suite test gates
#: on (read from the published wheels' ``sampling_client.py`` / ``training_client.py``).
ADDED_IN: dict[str, str] = {
    "sample:topk_sample_logprobs": "0.29.0",
    "sample:target_prompt_logprobs": "0.30.0",
    "sample:prompt_logprobs_last_n": "0.33.0",
    "param:TrainingClient.save_state.user_metadata": "0.27.1",
    "training:save_weights_external": "0.28.0",
    "service:close": "0.27.2",
    "field:SampledSequence.sequence_id": "0.26.0",
    "loss:gspo": "0.34.0",
    "loss:stable_reinforce": "0.35.0",
    "param:TrainingClient.save_weights_and_get_sampling_client.record_stability_info": "0.26.2",
    "unchecked:ForwardBackwardInput": "0.20.0",
}


def end_session(client: Any, timeout: float) -> None:
    """End ``client``'s session: ``ServiceClient.close`` (0.27.2 and later); before it, stop
    the SDK's heartbeats (``holder.close``), so the server expires the session after its
    heartbeat timeout (tinker 0.16 has no call that ends one)."""
    close = getattr(client, "close", None)
    if close is not None:
        resolve(close("success"), timeout)
        return
    holder = getattr(client, "holder", None)
    if holder is not None:
        holder.close()


def missing_reason(version: str, features: list[str]) -> str:
    """The skip reason of a test whose ``features`` the installed ``version`` cannot send:
    each feature with the release that added it (tests/conformance checks the wording)."""
    named = [
        f"{feature} (added in tinker {ADDED_IN[feature]})" if feature in ADDED_IN else feature
        for feature in features
    ]
    return f"tinker {version} cannot send {', '.join(named)}"


def supports(tinker: ModuleType, feature: str) -> bool:
    """Whether the installed SDK can send ``feature``: ``sample:<keyword>``,
    ``loss:<name>``, ``training:<method>``, ``service:<method>``, ``rest:<method>``,
    ``lora:<field>`` (a ``LoraConfig`` field), ``field:<Type>.<field>`` (a field of a
    ``tinker.types`` class), ``unchecked:<Type>`` (the SDK builds that type without
    validating its values, so it can send a value the server must refuse) or
    ``param:<Class>.<method>.<keyword>``."""
    kind, _, name = feature.partition(":")
    if kind == "sample":
        return name in _sample_keywords(tinker)
    if kind == "param":
        owner, method, keyword = name.split(".")
        cls = _rest_class(tinker) if owner == "RestClient" else getattr(tinker, owner)
        found = getattr(cls, method, None)
        return found is not None and keyword in inspect.signature(found).parameters
    if kind == "loss":
        return name in _loss_names(tinker)
    if kind == "training":
        return hasattr(tinker.TrainingClient, name)
    if kind == "service":
        return hasattr(tinker.ServiceClient, name)
    if kind == "rest":
        return hasattr(_rest_class(tinker), name)
    if kind == "lora":
        fields = getattr(tinker.types.LoraConfig, "model_fields", {})
        return name in fields
    if kind == "field":
        owner, field = name.split(".")
        cls = getattr(tinker.types, owner)
        return field in getattr(cls, "model_fields", {}) or field in getattr(
            cls, "__dataclass_fields__", {}
        )
    if kind == "unchecked":  # a dataclass type sends any value; a pydantic one validates it
        return not hasattr(getattr(tinker.types, name), "model_fields")
    raise ValueError(f"unknown SDK feature kind {kind!r} in {feature!r}")


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an SDK error carries (``APIStatusError.status_code``), else None.
    Releases before 0.30 raise a failed ``retrieve_future`` answer as ``ValueError("Error
    retrieving result: Error code: 422 - ...")``: its status is read from that text."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    if isinstance(exc, ValueError):
        found = re.match(r"Error retrieving result: Error code: (\d{3})\b", str(exc))
        return int(found.group(1)) if found else None
    return None


def body_of(exc: BaseException) -> Any:
    """The decoded error body of an SDK ``APIStatusError`` (None when there is none)."""
    body = getattr(exc, "body", None)
    if isinstance(body, (bytes, str)):
        try:
            return json.loads(body)
        except ValueError:
            return body
    return body


def wire_refusal(exc: BaseException) -> str | None:
    """The request field a server refused as not part of its wire, or None.

    A pydantic/FastAPI server answers a field it does not know with a 422 whose ``detail``
    lists ``{"loc": [..., "<field>"], "type": "extra_forbidden"}``; other servers say
    ``extra``/``unknown``/``not permitted`` next to the field's name. Only those answers
    count: a 4xx about a value (a bad rank, an unknown model) is not a wire mismatch."""
    status = status_of(exc)
    if status is None or not 400 <= status < 500:
        return None
    body = body_of(exc)
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, list):
        for item in detail:
            if not isinstance(item, dict):
                continue
            kind = str(item.get("type", "")) + " " + str(item.get("msg", ""))
            if re.search(r"extra|not permitted|unexpected|unknown field", kind, re.I):
                loc = [str(part) for part in item.get("loc", []) if part != "body"]
                return ".".join(loc) or kind
        return None
    text = str(detail if detail is not None else exc)
    found = re.search(
        r"(?:unknown|unexpected|extra|unrecognized) (?:field|key|argument|input)s?"
        r"[^'\"`]*['\"`]([\w.]+)['\"`]",
        text,
        re.I,
    )
    return found.group(1) if found else None
