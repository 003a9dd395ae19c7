"""Completed runtime results in Tinker's shapes: metric names and result bodies.

``ForwardBackwardOutput`` and ``SampleResponse`` go back as protobuf (the 0.38 SDK reads
them in no other form); the rest as JSON.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.responses import JSONResponse, Response

from localsession.runtime.errors import ServiceError
from localsession.server.tinker import codec, dro, rest, topk_targets
from localsession.server.tinker.dialect import Dialect, Future

PROTOBUF = "application/x-protobuf"


def _metric_name(name: str) -> str:
    if ":" in name:
        return name
    return f"{name}:sum" if name.endswith(("num", "flops")) else f"{name}:mean"


def fwd_metrics(result: dict[str, Any]) -> dict[str, float]:
    """Runtime forward metrics under Tinker's ``name:reduction`` names; ``loss:sum`` is the
    sum of every datum's elementwise loss (Tinker's reported loss)."""
    outputs = result.get("lossFnOutputs") or []
    total = math.fsum(
        float(v) for out in outputs for v in (out.get("elementwise_loss") or {}).get("data", [])
    )
    metrics = {"loss:sum": total}
    for name, value in (result.get("metrics") or {}).items():
        if name not in ("loss", "actor/pg_loss"):
            metrics[_metric_name(name)] = float(value)
    return metrics


def completed(dialect: Dialect, future: Future, payload: dict[str, Any]) -> Response:
    """A completed runtime op's result, in the Tinker shape its request type reads."""
    kind = future.kind
    if kind in ("forward", "forwardBackward"):
        outputs = payload.get("lossFnOutputs") or []
        if future.extra.get("groups"):  # (N, K) targets ran as K datums each
            outputs = topk_targets.regroup(outputs, future.extra["groups"])
        if future.extra.get("dro"):  # a cross-entropy surrogate ran: report DRO's loss
            outputs = dro.outputs(outputs, future.extra["dro"])
            payload = {**payload, "lossFnOutputs": outputs}
        data = codec.encode_forward_backward_output(fwd_metrics(payload), outputs)
        return Response(data, media_type=PROTOBUF)
    if kind == "optimizerStep":
        return JSONResponse({"metrics": payload.get("metrics") or {}})
    if kind in ("saveState", "saveWeights"):
        path = future.extra["path"]
        with dialect.lock:
            dialect.paths[path] = str(payload["modelPackageArn"])
        if future.extra.get("ttl"):
            rest.set_ttl(dialect, path, int(future.extra["ttl"]))
        if kind == "saveState":
            return JSONResponse({"path": path, "type": "save_weights"})
        if future.extra.get("external"):
            return JSONResponse({"path": path, "type": "save_weights_external"})
        out: dict[str, Any] = {"path": path, "type": "save_weights_for_sampler"}
        if future.extra.get("sampler_for"):
            out["sampling_session_id"] = dialect.create_sampler(path, None)
        return JSONResponse(out)
    if kind == "loadState":
        return JSONResponse(
            {"path": future.extra["path"], "model_id": future.model_id, "type": "load_weights"}
        )
    if kind == "sample":
        last_n = future.extra.get("last_n")
        prompt = payload.get("promptLogprobs")
        if last_n and prompt is not None:
            cut = len(prompt) - int(last_n)
            payload["promptLogprobs"] = [None if i < cut else v for i, v in enumerate(prompt)]
        return Response(
            codec.encode_sample_response(payload, future.extra["topk"]), media_type=PROTOBUF
        )
    raise ServiceError("InternalServerException", f"no Tinker result for a {kind} op", 500)
