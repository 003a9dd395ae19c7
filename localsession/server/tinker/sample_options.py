"""The ``asample`` options beyond the runtime's sample op: ``topk_sample_logprobs``,
``prompt_alt_tokens_k`` and ``target_prompt_logprobs`` (read here into
:class:`~localsession.port.SampleRequest` fields), and how their results are written into
the ``SampleResponse`` protobuf.

``target_prompt_logprobs`` is an int64 ``[len(prompt) - 1, K]`` table, dense or sparse CSR
(JSON ``sparse_crow_indices`` / ``sparse_col_indices``): cell ``[i, j]`` asks for the
logprob of that id at prompt position ``i + 1``; -1 (and, when sparse, every unlisted cell)
asks nothing. The answer is a dense float32 table of the same shape, 0.0 where nothing was
asked (the SDK's convention; a sparse request gets a dense answer here).
"""

from __future__ import annotations

import struct
from typing import Any

from localsession.runtime import errors


def options(body: dict[str, Any], prompt_length: int) -> dict[str, Any]:
    """The SampleRequest fields an ``asample`` body asks for (empty: none)."""
    out: dict[str, Any] = {}
    k = body.get("topk_sample_logprobs") or 0
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise errors.validation(f"topk_sample_logprobs={k!r} must be an integer >= 0")
    if k:
        out["topk_sample_logprobs"] = k
    alt = body.get("prompt_alt_tokens_k") or 0
    if not isinstance(alt, int) or isinstance(alt, bool) or alt < 0:
        raise errors.validation(f"prompt_alt_tokens_k={alt!r} must be an integer >= 0")
    if alt:
        out["prompt_alt_tokens_k"] = alt
    table = body.get("target_prompt_logprobs")
    if table is not None:
        out["target_prompt_logprobs"] = _table(table, prompt_length)
    return out


def _table(given: Any, prompt_length: int) -> tuple[tuple[int, ...], ...]:
    where = "target_prompt_logprobs"
    if not isinstance(given, dict) or not isinstance(given.get("data"), list):
        raise errors.validation(f"{where} must be a TensorData with a data list")
    shape = given.get("shape") or []
    if len(shape) != 2 or shape[0] != prompt_length - 1:
        raise errors.validation(
            f"{where} has shape {shape}; it must be [len(prompt) - 1, K] = [{prompt_length - 1}, K]"
        )
    rows, width = int(shape[0]), int(shape[1])
    data = given["data"]
    if not all(isinstance(v, (int, float)) and float(v) == int(v) for v in data):
        raise errors.validation(f"{where} must hold integer token ids (-1 asks nothing)")
    crow, col = given.get("sparse_crow_indices"), given.get("sparse_col_indices")
    if crow is None:
        if len(data) != rows * width:
            raise errors.validation(f"{where} holds {len(data)} ids, its shape {rows * width}")
        flat = [int(v) for v in data]
    else:
        if not isinstance(col, list) or len(crow) != rows + 1 or len(col) != len(data):
            raise errors.validation(f"{where} is a sparse CSR tensor with inconsistent indices")
        flat = [-1] * (rows * width)
        for r in range(rows):
            for j in range(int(crow[r]), int(crow[r + 1])):
                if not 0 <= int(col[j]) < width:
                    raise errors.validation(f"{where} has a column index out of range")
                flat[r * width + int(col[j])] = int(data[j])
    return tuple(tuple(flat[r * width : (r + 1) * width]) for r in range(rows))


def alt_tokens(pb: Any, tokens: list[list[int]], logprobs: list[list[float]]) -> Any:
    """The ``PromptAltTokens`` message: int64 ids and float32 logprobs, ``[L - 1, k]``."""
    ids = [int(v) for row in tokens for v in row]
    lps = [float(v) for row in logprobs for v in row]
    shape = [len(tokens), len(tokens[0]) if tokens else 0]
    return pb.PromptAltTokens(
        tokens=pb.Tensor(
            dense=struct.pack(f"<{len(ids)}q", *ids), dtype=pb.DTYPE_INT64, shape=shape
        ),
        logprobs=pb.Tensor(
            dense=struct.pack(f"<{len(lps)}f", *lps), dtype=pb.DTYPE_FLOAT32, shape=shape
        ),
    )


def target_tensor(pb: Any, rows: list[list[float | None]]) -> Any:
    """The answered table as a dense float32 ``Tensor`` (0.0: nothing asked)."""
    width = len(rows[0]) if rows else 0
    values = [0.0 if v is None else float(v) for row in rows for v in row]
    return pb.Tensor(
        dense=struct.pack(f"<{len(values)}f", *values),
        dtype=pb.DTYPE_FLOAT32,
        shape=[len(rows), width],
    )
