"""Tinker's datum provenance (``Datum.with_provenance``): decoding the runs a
``forward_backward`` body carries, and reading which recorded token each position claims.

A datum's provenance is two lists of runs, one tiling ``model_input``'s tokens and one tiling
``loss_fn_inputs["target_tokens"]``; each run says its ``length`` positions are positions
``[offset, offset + length)`` of a sampled sequence's tokens (``SampledProvenanceSpan``) or of
the prompt of the request that sampled it (``PromptProvenanceSpan``). The SDK sends them in
the protobuf body; a JSON body may give each run as ``{"sampled_tokens": {...}}`` /
``{"prompt_tokens": {...}}`` or flat with ``"type": "sampled" | "prompt"``.
"""

from __future__ import annotations

from typing import Any

from localsession.port import ProvenanceSpan
from localsession.runtime import errors

Spans = tuple[ProvenanceSpan, ...] | None


def from_pb(msg: Any, index: int) -> tuple[Spans, Spans]:
    """A protobuf datum's provenance (``model_input_spans``, ``loss_fn_input_spans``)."""
    out: list[Spans] = []
    for name in ("model_input_spans", "loss_fn_input_spans"):
        runs = []
        for span in getattr(msg, name, ()):
            arm = span.WhichOneof("span")
            if arm is None:
                raise errors.validation(f"datum {index}: a {name} run names no span kind")
            run = getattr(span, arm)
            runs.append(
                _span(run.sequence_id, run.offset, run.length, arm == "sampled_tokens", index)
            )
        out.append(tuple(runs) or None)
    if (out[0] is None) != (out[1] is None):
        raise errors.validation(
            f"datum {index}: provenance comes as a pair: give both model_input_spans and "
            "loss_fn_input_spans (Datum.with_provenance), or neither"
        )
    return out[0], out[1]


def _span(sequence_id: Any, offset: Any, length: Any, sampled: bool, index: int) -> ProvenanceSpan:
    if not isinstance(sequence_id, str) or not sequence_id:
        raise errors.validation(f"datum {index}: a provenance run needs a sequence_id")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (offset, length)):
        raise errors.validation(f"datum {index}: a provenance run's offset and length are ints")
    if offset < 0 or length < 0:
        raise errors.validation(f"datum {index}: a provenance run's offset and length are >= 0")
    return ProvenanceSpan(sequence_id, int(offset), int(length), sampled)


def from_json(value: dict[str, Any], index: int) -> tuple[Spans, Spans]:
    """A JSON datum's provenance: each run ``{"sampled_tokens": {...}}`` or
    ``{"prompt_tokens": {...}}`` (the protobuf arms), or flat with ``"type"`` ``sampled`` /
    ``prompt``."""
    out: list[Spans] = []
    for name in ("model_input_spans", "loss_fn_input_spans"):
        given = value.get(name)
        if given is None:
            out.append(None)
            continue
        if not isinstance(given, list):
            raise errors.validation(f"datum {index}: {name} must be a list of runs")
        runs = []
        for run in given:
            if not isinstance(run, dict):
                raise errors.validation(f"datum {index}: each {name} run is an object")
            arm = "sampled_tokens" if "sampled_tokens" in run else "prompt_tokens"
            body = run.get(arm, run)
            sampled = arm == "sampled_tokens" or run.get("type") == "sampled"
            if not isinstance(body, dict):
                raise errors.validation(f"datum {index}: each {name} run is an object")
            runs.append(
                _span(
                    body.get("sequence_id"),
                    body.get("offset", 0),
                    body.get("length"),
                    sampled,
                    index,
                )
            )
        out.append(tuple(runs))
    if (out[0] is None) != (out[1] is None):
        raise errors.validation(
            f"datum {index}: provenance comes as a pair: give both model_input_spans and "
            "loss_fn_input_spans, or neither"
        )
    return out[0], out[1]
