"""Completed runtime results in Tinker's shapes: metric names and result bodies.

The Tinker dialect's one serialiser: it reads the runtime's typed results
(``port_results``, from ``Service.operation_outcome``), never the SageMaker wire's.
``ForwardBackwardOutput`` and ``SampleResponse`` go back as protobuf to an SDK that asks for
it (``Accept: application/x-protobuf``: tinker 0.28 and later), and as their JSON form
(json_results.py) to one that does not (tinker 0.16 reads only JSON); the rest as JSON.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.responses import JSONResponse, Response

from localsession import vocab
from localsession.port_results import (
    ForwardResult,
    OpResult,
    OptimResult,
    SampleResult,
    SaveResult,
)
from localsession.runtime.errors import ServiceError
from localsession.server.tinker import codec, dro, json_results, topk_targets
from localsession.server.tinker.dialect import Dialect
from localsession.server.tinker.future_table import Future

PROTOBUF = "application/x-protobuf"


def _metric_name(name: str) -> str:
    """``name:reduction``: a runtime metric under the reduction the vocabulary states for it
    (``vocab.METRIC_REDUCTIONS``); a name that states its own (``x:sum``) as it is; any
    other (a custom loss's own metric) as a mean."""
    if ":" in name:
        return name
    try:
        return vocab.Metric(name).tinker_name
    except ValueError:
        return f"{name}:mean"


def fwd_metrics(result: ForwardResult) -> dict[str, float]:
    """Runtime forward metrics under Tinker's ``name:reduction`` names; ``loss:sum`` is the
    sum of every datum's elementwise loss (Tinker's reported loss)."""
    total = math.fsum(float(v) for out in result.outputs for v in out.elementwise_loss)
    metrics = {vocab.Metric.LOSS.tinker_name: total}
    for name, value in result.metrics.items():
        if name not in vocab.TINKER_OMITTED_METRICS:
            metrics[_metric_name(name)] = float(value)
    return metrics


def completed(dialect: Dialect, future: Future, result: OpResult, proto: bool = True) -> Response:
    """A completed runtime op's result, in the Tinker shape its request type reads
    (``proto``: whether the caller accepts protobuf bodies)."""
    kind = future.kind
    if isinstance(result, ForwardResult):
        outputs = result.outputs
        width = 0
        if future.extra.get("groups"):  # (N, K) targets ran as K datums each
            outputs = topk_targets.regroup(outputs, future.extra["groups"])
            width = topk_targets.width(future.extra["groups"])
        if future.extra.get(dro.INPUTS):  # a cross-entropy surrogate ran: report DRO's loss
            outputs = dro.outputs(outputs, future.extra[dro.INPUTS])
            result = ForwardResult(result.metrics, outputs)
        if not proto:
            return JSONResponse(
                json_results.forward_backward_output(fwd_metrics(result), outputs, width)
            )
        data = codec.encode_forward_backward_output(fwd_metrics(result), outputs, width)
        return Response(data, media_type=PROTOBUF)
    if isinstance(result, OptimResult):
        return JSONResponse({"metrics": result.metrics})
    if isinstance(result, SaveResult):
        path = future.extra["path"]
        if future.session is not None and future.op_id is not None:  # recorded once, at the
            # op's completion (checkpoints.py); this covers a read that came before that
            dialect.checkpoints.completed(future.session, future.op_id, result.package_arn)
        if kind == vocab.OpKind.SAVE_STATE:
            return JSONResponse({"path": path, "type": "save_weights"})
        if future.extra.get("external"):
            return JSONResponse({"path": path, "type": "save_weights_external"})
        out: dict[str, Any] = {"path": path, "type": "save_weights_for_sampler"}
        if future.extra.get("sampling_session_id"):  # made when the save completed
            out["sampling_session_id"] = future.extra["sampling_session_id"]
            if future.extra.get("unnamed"):  # save_weights_and_get_sampling_client: the SDK
                out["path"] = None  # reads the sampler only (0.16 asserts there is no path)
        return JSONResponse(out)
    if kind == vocab.OpKind.LOAD_STATE:
        return JSONResponse(
            {"path": future.extra["path"], "model_id": future.model_id, "type": "load_weights"}
        )
    if isinstance(result, SampleResult):
        topk, last_n = future.extra["topk"], future.extra.get("last_n")
        if not proto:
            return JSONResponse(json_results.sample_response(result, topk, last_n))
        data = codec.encode_sample_response(result, topk, last_n)
        return Response(data, media_type=PROTOBUF)
    raise ServiceError(vocab.ErrorCode.INTERNAL, f"no Tinker result for a {kind} op", 500)
