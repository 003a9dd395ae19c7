"""A forward_backward body whose numbers promise more than it holds is refused by name,
before anything of the promised size is made (server/tinker/codec.py, topk_targets.py).

Each case was a few hundred bytes that made the server allocate gigabytes or answer a
plain-text 500 (an HTTP fuzz): a sparse CSR target of shape [1, 2**62], CSR row offsets
past the column list, a JSON shape of 1e999, and 2-D targets whose shape outgrows their
values.
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any

import pytest

from localsession import vocab
from localsession.port import TrainingDatum
from localsession.runtime.errors import ServiceError
from localsession.server.tinker import codec, topk_targets

pytest.importorskip("tinker")


def _sparse_body(shape: list[int], crow: list[int], col: list[int], values: list[int]) -> bytes:
    """A protobuf forward_backward of one datum whose target_tokens is sparse CSR."""
    from tinker.proto import tinker_public_pb2 as pb

    request = pb.ForwardBackwardRequest(model_id="m", seq_id=1, loss_fn="cross_entropy")
    datum = request.data.add()
    datum.model_input.add().encoded_text.tokens = struct.pack("<3i", 5, 6, 7)
    target = datum.loss_fn_inputs["target_tokens"]
    target.dtype = pb.DTYPE_INT64
    target.shape.extend(shape)
    target.sparse_csr.crow_indices = struct.pack(f"<{len(crow)}q", *crow)
    target.sparse_csr.col_indices = struct.pack(f"<{len(col)}q", *col)
    target.sparse_csr.values = struct.pack(f"<{len(values)}q", *values)
    return bytes(request.SerializeToString())


def _decode(body: bytes, content_type: str = "application/x-protobuf") -> Any:
    return codec.decode_forward_backward(body, content_type, None)


def test_a_sparse_target_is_made_dense_where_it_is_consistent() -> None:
    """The control: a [3, 2] CSR target with two stored values becomes its dense rows."""
    *_, datums, _ = _decode(_sparse_body([3, 2], [0, 1, 1, 2], [1, 0], [7, 9]))
    assert datums[0].loss_fn_inputs["target_tokens"] == [0, 7, 0, 0, 9, 0]


@pytest.mark.parametrize(
    ("shape", "crow", "col", "values", "words"),
    [
        ([1, 2**62], [0, 0], [], [], "too large to make dense (at most 16,777,216 values)"),
        ([2, 2], [0, 5, 5], [1], [3], "inconsistent indices"),  # offsets past the columns
        ([2, 2], [0, 1, 0], [1], [3], "inconsistent indices"),  # offsets going back
        ([-1, 2], [], [], [], "inconsistent indices"),  # no row offsets at all
    ],
)
def test_an_inconsistent_or_huge_sparse_target_is_refused(
    shape: list[int], crow: list[int], col: list[int], values: list[int], words: str
) -> None:
    with pytest.raises(ServiceError, match=re.escape(words)) as refused:
        _decode(_sparse_body(shape, crow, col, values))
    assert refused.value.http_status == 400


def test_a_json_shape_that_is_no_integer_is_refused() -> None:
    body = {
        "model_id": "m",
        "seq_id": 1,
        "forward_backward_input": {
            "loss_fn": "cross_entropy",
            "data": [
                {
                    "model_input": {"chunks": [{"tokens": [5, 6, 7]}]},
                    "loss_fn_inputs": {"target_tokens": {"data": [6, 7, 8], "shape": [0]}},
                }
            ],
        },
    }
    raw = json.dumps(body).replace('"shape": [0]', '"shape": [1e999]').encode()
    with pytest.raises(ServiceError, match="cannot convert float infinity to integer"):
        _decode(raw, "application/json")


def test_2d_targets_whose_shape_outgrows_their_values_are_refused_at_once() -> None:
    """(N, K) = (1, 2**62) with three values: refused naming both, with no N*K weights made
    first (a [3, 10**9] shape took 17 s and ~24 GB before its 400)."""
    datum = TrainingDatum([5, 6, 7], {"target_tokens": [6, 7, 8]})
    shapes = [{"target_tokens": [1, 2**62]}]
    with pytest.raises(ServiceError, match=r"shape \[1, 4611686018427387904\] but holds 3 values"):
        topk_targets.expand(vocab.LossFunction.CROSS_ENTROPY, [datum], shapes)


@pytest.mark.parametrize(
    "error",
    [AttributeError("'int' object has no attribute 'get'"), OverflowError("int too large")],
)
def test_a_body_of_the_wrong_shape_is_a_400_in_the_sdks_error_shape(error: Exception) -> None:
    """What a route raises reading a body of the wrong shape (a list where an object goes,
    JSON's 1e999 as a count) is the client's mistake: a JSON 400, not a plain-text 500."""
    import asyncio

    from localsession.server.tinker.routes import guarded

    async def handler(request: Any) -> Any:
        raise error

    answer = asyncio.run(guarded(handler)(None))  # type: ignore[arg-type]  # no request read
    assert answer.status_code == 400
    assert json.loads(answer.body) == {
        "detail": f"malformed request: {error}",
        "code": "ValidationException",
    }


def test_a_loss_fn_config_that_is_no_object_is_refused_by_name_freeing_its_number() -> None:
    body = {
        "model_id": "m",
        "seq_id": 7,
        "forward_backward_input": {"loss_fn": "ppo", "loss_fn_config": "abc", "data": []},
    }
    with pytest.raises(codec.BodyRefused, match="loss_fn_config must be an object") as refused:
        _decode(json.dumps(body).encode(), "application/json")
    assert (refused.value.model_id, refused.value.seq_id) == ("m", 7)  # the route frees 7
