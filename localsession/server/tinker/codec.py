"""Tinker's binary bodies: protobuf (optionally zstd-framed) in, protobuf out.

The message classes are the installed ``tinker`` package's own (``tinker.proto``), imported
on first use, so this tree holds no copy of the schema and ``import localsession`` stays
light. Everything here turns Tinker's shapes into the port's typed values and back; no behaviour
lives here.

- :func:`decode_forward_backward`: a ``ForwardBackwardRequest`` body (protobuf, or its JSON
  twin) -> ``(model_id, seq_id, loss_fn, loss_fn_config, forward_only, datums)``, the datums
  as the port's :class:`~localsession.port.TrainingDatum` values (tokens concatenated, each
  loss input flattened row by row).
- :func:`encode_forward_backward_output`: a typed ``forward``/``forwardBackward`` result's
  datum outputs -> ``ForwardBackwardOutput`` bytes (one batched ``ArrayRecord``).
- :func:`encode_sample_response`: a typed ``sample`` result -> ``SampleResponse`` bytes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

from localsession.port import TrainingDatum
from localsession.port_results import DatumOutput, SampleResult, TopLogprob
from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.server.tinker import provenance

#: Bodies may arrive zstd-framed; a frame may not inflate past this (the body limit's twin).
MAX_INFLATED_BYTES = 256 * 1024 * 1024
#: The SDK's sentinel for an empty top-k cell (tinker.types.topk_logprobs.MASK_LOGPROB).
MASK_LOGPROB = -99999.0


#: A datum's loss input shapes, by key (``[N]``, or ``[N, K]`` for 2-D targets).
Shapes = dict[str, list[int]]


#: The most values a sparse tensor in a body is made dense to (a 136-byte body claiming
#: shape [1, 3e8] built an 18 GB list).
MAX_DENSE = 2**24


class BodyRefused(ServiceError):
    """A refusal raised while decoding a body whose header (model and ``seq_id``) was read:
    the route frees that sequence number, as every other refusal does (numbering.py)."""

    def __init__(self, refusal: ServiceError, model_id: str, seq_id: int) -> None:
        super().__init__(refusal.code, refusal.message, refusal.http_status)
        self.model_id = model_id
        self.seq_id = seq_id


def _datums(decode: Any, items: Any, model_id: str, seq_id: int) -> Any:
    """``_split`` of every item decoded with ``decode``; a refusal names the request."""
    try:
        return _split([decode(d, i) for i, d in enumerate(items)])
    except ServiceError as exc:
        raise BodyRefused(exc, model_id, seq_id) from None
    except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError) as exc:
        refusal = errors.validation(f"malformed forward_backward datum: {exc}")
        raise BodyRefused(refusal, model_id, seq_id) from None


def _pb() -> Any:
    try:
        from tinker.proto import tinker_public_pb2
    except ImportError as exc:  # pragma: no cover - the extra is what installs it
        raise errors.validation(
            "this server cannot read Tinker's protobuf bodies: the `tinker` package is not "
            "installed; pip install 'localsession[tinker]'"
        ) from exc
    return tinker_public_pb2


def inflate(body: bytes, encoding: str | None) -> bytes:
    """The body without its ``Content-Encoding`` (only ``zstd`` and identity exist)."""
    if not encoding or encoding == "identity":
        return body
    if encoding != "zstd":
        raise errors.validation(
            f"Content-Encoding {encoding!r} is not supported; send zstd or an uncompressed body"
        )
    import zstandard

    try:
        out: bytes = zstandard.ZstdDecompressor().decompress(
            body, max_output_size=MAX_INFLATED_BYTES
        )
    except zstandard.ZstdError as exc:
        raise errors.validation(
            f"the body is not a valid zstd frame ({exc}); compress the serialized protobuf "
            "with zstd, or drop the Content-Encoding header"
        ) from None
    return out


def _ints(raw: bytes, fmt: str, where: str) -> list[int]:
    size = struct.calcsize(fmt)
    if len(raw) % size:
        raise errors.validation(f"{where} holds {len(raw)} bytes, not a whole number of {fmt}")
    return [v[0] for v in struct.iter_unpack("<" + fmt, raw)]


def _tensor(msg: Any, where: str) -> dict[str, Any]:
    """A ``Tensor`` message -> wire ``TensorData`` (a sparse CSR one is made dense)."""
    pb = _pb()
    if msg.dtype == pb.DTYPE_FLOAT32:
        dtype, fmt = "float32", "f"
    elif msg.dtype == pb.DTYPE_INT64:
        dtype, fmt = "int64", "q"
    else:
        raise errors.validation(f"{where} has dtype {msg.dtype}; send float32 or int64")
    shape = list(msg.shape)
    if msg.HasField("sparse_csr"):
        values = _ints(msg.sparse_csr.values, fmt, where) if fmt == "q" else None
        fvalues = values if values is not None else _floats(msg.sparse_csr.values, where)
        crow = _ints(msg.sparse_csr.crow_indices, "q", where)
        col = _ints(msg.sparse_csr.col_indices, "q", where)
        if (
            len(shape) != 2
            or min(shape) < 0
            or len(crow) != shape[0] + 1
            or len(col) != len(fvalues)
            or crow[0] != 0
            or crow[-1] != len(col)
            or any(a > b for a, b in zip(crow, crow[1:], strict=False))
        ):
            raise errors.validation(f"{where} is a sparse CSR tensor with inconsistent indices")
        if shape[0] * shape[1] > MAX_DENSE:
            raise errors.validation(
                f"{where} is a sparse CSR tensor of shape {shape}: too large to make dense "
                f"(at most {MAX_DENSE:,} values); send it dense, or as (N, K) targets"
            )
        dense: list[Any] = [0] * (shape[0] * shape[1])
        for row in range(shape[0]):
            for j in range(crow[row], crow[row + 1]):
                if not 0 <= col[j] < shape[1]:
                    raise errors.validation(f"{where} has a column index out of range")
                dense[row * shape[1] + col[j]] = fvalues[j]
        return {"data": dense, "dtype": dtype, "shape": shape}
    data = _ints(msg.dense, "q", where) if fmt == "q" else _floats(msg.dense, where)
    out: dict[str, Any] = {"data": data, "dtype": dtype}
    if shape:
        out["shape"] = shape
    return out


def _floats(raw: bytes, where: str) -> list[float]:
    if len(raw) % 4:
        raise errors.validation(f"{where} holds {len(raw)} bytes, not whole float32 values")
    return [v[0] for v in struct.iter_unpack("<f", raw)]


def _datum(msg: Any, index: int) -> tuple[TrainingDatum, Shapes]:
    if not msg.model_input:
        raise errors.validation(f"datum {index} has no model_input chunks; give it token ids")
    tokens: list[int] = []
    for c, chunk in enumerate(msg.model_input):
        kind = chunk.WhichOneof("chunk") if chunk.DESCRIPTOR.oneofs else None
        if kind not in (None, "encoded_text"):
            raise errors.validation(
                f"datum {index} chunk {c} is {kind!r}: only encoded_text (token) chunks run "
                "locally; image and audio inputs are not supported"
            )
        tokens += _ints(chunk.encoded_text.tokens, "i", f"datum {index} chunk {c}")
    tensors = {
        key: _tensor(value, f"datum {index} loss_fn_inputs[{key!r}]")
        for key, value in msg.loss_fn_inputs.items()
    }
    inputs = {key: t["data"] for key, t in tensors.items()}
    shapes = {key: list(t.get("shape") or [len(t["data"])]) for key, t in tensors.items()}
    return TrainingDatum(tokens, inputs, *provenance.from_pb(msg, index)), shapes


def _flat(data: list[Any]) -> list[Any]:
    """A JSON tensor's nested rows flattened row by row (a flat list as it is)."""
    if data and isinstance(data[0], list):
        return [x for row in data for x in (_flat(row) if isinstance(row, list) else [row])]
    return data


def _json_values(given: Any, where: str) -> list[Any]:
    """A JSON loss input (a ``TensorData`` object, or a bare list) -> its flat values."""
    if isinstance(given, list):
        return _flat(given)
    if not isinstance(given, dict) or not isinstance(given.get("data"), list):
        raise errors.validation(f"{where} must be a TensorData object with a data list")
    return _flat(given["data"])


def _json_datum(value: Any, index: int) -> tuple[TrainingDatum, Shapes]:
    if not isinstance(value, dict):
        raise errors.validation(f"forward_backward_input.data[{index}] must be an object")
    chunks = (value.get("model_input") or {}).get("chunks") or []
    if not chunks:
        raise errors.validation(f"datum {index} has no model_input chunks; give it token ids")
    tokens: list[Any] = []
    for c, chunk in enumerate(chunks):
        if not isinstance(chunk, dict) or chunk.get("type", "encoded_text") != "encoded_text":
            raise errors.validation(f"datum {index} chunk {c}: only encoded_text chunks run")
        ids = chunk.get("tokens")
        if not isinstance(ids, list):
            raise errors.validation(f"datum {index} chunk {c}: tokens must be a list of ids")
        tokens += ids
    given = value.get("loss_fn_inputs") or {}
    inputs = {
        key: _json_values(td, f"datum {index} loss_fn_inputs[{key!r}]") for key, td in given.items()
    }
    shapes = {key: _json_shape(given[key], len(values)) for key, values in inputs.items()}
    return TrainingDatum(tokens, inputs, *provenance.from_json(value, index)), shapes


def _json_shape(given: Any, count: int) -> list[int]:
    """A JSON loss input's shape: its ``shape`` if given, else its nesting's (rows, width)."""
    if isinstance(given, dict) and given.get("shape"):
        return [int(n) for n in given["shape"]]
    data = given.get("data") if isinstance(given, dict) else given
    if isinstance(data, list) and data and isinstance(data[0], list):
        return [len(data), len(data[0])]
    return [count]


def decode_forward_backward(
    body: bytes, content_type: str, encoding: str | None
) -> tuple[str, int, str, dict[str, Any], bool, list[TrainingDatum], list[Shapes]]:
    """A forward_backward body -> (model_id, seq_id, loss_fn, config, forward_only, datums,
    each datum's loss input shapes)."""
    raw = inflate(body, encoding)
    if "json" in content_type:
        from localsession.server import wire

        request = wire.parse_body(raw)
        fbi = request.get("forward_backward_input") or request.get("forward_input") or {}
        model_id, seq_id = str(request.get("model_id") or ""), int(request.get("seq_id") or 0)
        data, loss_config = fbi.get("data"), fbi.get("loss_fn_config") or {}
        if not isinstance(data, list):
            refusal = errors.validation("forward_backward_input.data must be a list of datums")
            raise BodyRefused(refusal, model_id, seq_id)
        if not isinstance(loss_config, dict):
            refusal = errors.validation(
                f"forward_backward_input.loss_fn_config must be an object of numbers, got "
                f"{type(loss_config).__name__}"
            )
            raise BodyRefused(refusal, model_id, seq_id)
        return (
            model_id,
            seq_id,
            str(fbi.get("loss_fn") or ""),
            dict(loss_config),
            bool(request.get("forward_only", False)),
            *_datums(_json_datum, data, model_id, seq_id),
        )
    msg = _pb().ForwardBackwardRequest()
    try:
        msg.ParseFromString(raw)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise errors.validation(
            f"the body is not a valid ForwardBackwardRequest protobuf ({exc}); send the "
            "serialized tinker.proto message (Content-Type: application/x-protobuf) or JSON"
        ) from None
    config: dict[str, Any] = dict(msg.loss_fn_config.items())
    for key, value in msg.loss_fn_config_v2.items():
        kind = value.WhichOneof("value") if value.DESCRIPTOR.oneofs else "number"
        config[key] = value.text if kind == "text" else value.number
    datums, shapes = _datums(_datum, msg.data, msg.model_id, msg.seq_id)
    return msg.model_id, msg.seq_id, msg.loss_fn, config, msg.forward_only, datums, shapes


def _split(
    parsed: list[tuple[TrainingDatum, Shapes]],
) -> tuple[list[TrainingDatum], list[Shapes]]:
    return [d for d, _ in parsed], [shape for _, shape in parsed]


def _batched(rows: list[list[float]], width: int = 0) -> Any:
    """One float32 value list per datum -> one ``BatchedTensor`` (rows of ``width`` values
    each, ``(N, width)``, when ``width``)."""
    pb = _pb()
    parts = [struct.pack(f"<{len(row)}f", *row) for row in rows]
    offsets = [0]
    for part in parts:
        offsets.append(offsets[-1] + len(part))
    return pb.BatchedTensor(
        data=b"".join(parts),
        offsets=struct.pack(f"<{len(offsets)}q", *offsets),
        dtype=pb.DTYPE_FLOAT32,
        trailing_shape=[width] if width else [],
    )


def encode_forward_backward_output(
    metrics: dict[str, float], outputs: Sequence[DatumOutput], width: int = 0
) -> bytes:
    """A forward/forwardBackward result -> ``ForwardBackwardOutput`` protobuf bytes: the
    per-datum ``logprobs`` and ``elementwise_loss`` (other diagnostics stay out), each
    ``(N, width)`` row-major when ``width`` (2-D targets, topk_targets.py)."""
    pb = _pb()
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics=metrics)
    record = msg.loss_fn_outputs.add()
    record.num_datums = len(outputs)
    if outputs:
        record.fields["logprobs"].CopyFrom(_batched([out.logprobs for out in outputs], width))
        record.fields["elementwise_loss"].CopyFrom(
            _batched([out.elementwise_loss for out in outputs], width)
        )
    return bytes(msg.SerializeToString())


def _topk(rows: list[list[TopLogprob]], k: int) -> Any:
    """Per-position top-k alternatives -> a dense ``TopkLogprobs`` (sentinel-padded)."""
    pb = _pb()
    ids: list[int] = []
    lps: list[float] = []
    for row in rows:
        cells = row[:k]
        ids += [int(c.token_id) for c in cells] + [0] * (k - len(cells))
        lps += [float(c.logprob) for c in cells] + [MASK_LOGPROB] * (k - len(cells))
    return pb.TopkLogprobs(
        token_ids=struct.pack(f"<{len(ids)}i", *ids),
        logprobs=struct.pack(f"<{len(lps)}f", *lps),
        k=k,
        length=len(rows),
    )


def encode_sample_response(
    result: SampleResult, topk: int, prompt_last_n: int | None = None
) -> bytes:
    """A typed ``sample`` result -> ``SampleResponse`` protobuf bytes. Prompt logprobs the
    SDK reads as None (the first, which has no context, and any before the last
    ``prompt_last_n`` when that is set) are sent as NaN."""
    pb = _pb()
    msg = pb.SampleResponse()
    for seq in result.sequences:
        out = msg.sequences.add()
        stopped = seq.stop_reason == "stop"
        out.stop_reason = pb.STOP_REASON_STOP if stopped else pb.STOP_REASON_LENGTH
        out.tokens = struct.pack(f"<{len(seq.tokens)}i", *seq.tokens)
        out.logprobs = struct.pack(f"<{len(seq.logprobs)}f", *seq.logprobs)
        if (top := seq.topk_logprobs) is not None:
            width = max((len(row) for row in top), default=0)
            out.topk_sampled_logprobs.CopyFrom(_topk(top, width))
    prompt = result.prompt_logprobs
    if prompt is not None:
        cut = len(prompt) - int(prompt_last_n) if prompt_last_n else 0
        values = [math.nan if i == 0 or i < cut else v for i, v in enumerate(prompt)]
        msg.prompt_logprobs = struct.pack(f"<{len(values)}f", *values)
    rows = result.topk_prompt_logprobs
    if rows is not None and topk > 0:
        msg.topk_prompt_logprobs.CopyFrom(_topk(rows, topk))
    if (targets := result.target_prompt_logprobs) is not None:
        from localsession.server.tinker.sample_options import target_tensor

        msg.target_prompt_logprobs.CopyFrom(target_tensor(pb, targets))
    if (alt := result.prompt_alt_tokens) is not None:
        from localsession.server.tinker.sample_options import alt_tokens

        msg.prompt_alt_tokens.CopyFrom(alt_tokens(pb, alt.tokens, alt.logprobs))
    return bytes(msg.SerializeToString())


def chunk_tokens(chunk: Any) -> list[Any]:
    """A prompt chunk's token ids (the runtime checks they are ints >= 0)."""
    if not isinstance(chunk, dict) or chunk.get("type", "encoded_text") != "encoded_text":
        raise errors.validation("only encoded_text (token) prompt chunks are supported locally")
    ids = chunk.get("tokens")
    if not isinstance(ids, list):
        raise errors.validation("a prompt chunk's tokens must be a list of token ids")
    return ids
