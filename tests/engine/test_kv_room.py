"""RoomyLayer (engine/kv_room.py) holds what transformers' concatenating cache holds, writes
decode steps in place, and takes the assignments transformers' own cache operations make."""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from localsession.engine.builtin import build_builtin
from localsession.engine.decode_common import forward_kwargs, output_cache
from localsession.engine.kv_room import FIRST_ROOM, RoomyLayer, make_roomy

from .conftest import TINY


def _kv(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 2, n, 4, generator=g), torch.randn(3, 2, n, 4, generator=g)  # [S,H,n,D]


def test_appends_equal_concatenation_and_stay_in_place_within_the_room() -> None:
    layer = RoomyLayer()
    k0, v0 = _kv(5, 0)
    layer.update(k0, v0)
    layer.reserve(6)
    buffer = layer._k.buffer
    assert buffer is not None
    keys, values = [k0], [v0]
    for step in range(6):
        k, v = _kv(1, step + 1)
        got_k, got_v = layer.update(k, v)
        keys.append(k)
        values.append(v)
        assert torch.equal(got_k, torch.cat(keys, dim=-2))
        assert torch.equal(got_v, torch.cat(values, dim=-2))
    assert layer._k.buffer is buffer  # six steps fit the reserved room: no new buffer
    assert layer.get_seq_length() == 11
    k, v = _kv(1, 99)  # past the room: a larger buffer, same contents
    got_k, _ = layer.update(k, v)
    assert layer._k.buffer is not buffer
    assert torch.equal(got_k, torch.cat([*keys, k], dim=-2))


def test_transformers_own_operations_assign_through_it() -> None:
    layer = RoomyLayer()
    k0, v0 = _kv(4, 0)
    layer.update(k0, v0)
    layer.reserve(8)
    layer.batch_select_indices(torch.tensor([2, 0]))
    k1, v1 = _kv(1, 1)
    got_k, got_v = layer.update(k1[:2], v1[:2])
    assert torch.equal(got_k, torch.cat([k0[[2, 0]], k1[:2]], dim=-2))
    assert torch.equal(got_v, torch.cat([v0[[2, 0]], v1[:2]], dim=-2))
    layer.crop(-2)  # drop the last two positions
    assert layer.keys is not None and torch.equal(layer.keys, k0[[2, 0], :, :3])


def _decode(model: Any, roomy: bool, steps: int) -> list[torch.Tensor]:
    ids_RL = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    cache_kw, _ = forward_kwargs(model)  # as the sampler passes it
    with torch.no_grad():
        out = model(input_ids=ids_RL, use_cache=True)
        cache = output_cache(out)
        assert type(cache) is DynamicCache
        if roomy:
            make_roomy(cache, steps)
            assert all(type(layer) is RoomyLayer for layer in cache.layers)
        logits = [out.logits[:, -1]]
        for _ in range(steps):
            next_R1 = logits[-1].argmax(-1, keepdim=True)
            out = model(input_ids=next_R1, use_cache=True, **{cache_kw: cache})
            logits.append(out.logits[:, -1])
    return logits


def test_a_model_decodes_the_same_logits_through_it() -> None:
    model, _ = build_builtin(TINY)
    plain, roomy = _decode(model, False, 6), _decode(model, True, 6)
    assert all(torch.equal(a, b) for a, b in zip(plain, roomy, strict=True))


def test_a_large_max_tokens_reserves_only_the_first_room() -> None:
    model, _ = build_builtin(TINY)
    with torch.no_grad():
        cache = output_cache(model(input_ids=torch.tensor([[5, 6, 7]]), use_cache=True))
    make_roomy(cache, 100_000)  # a max_tokens far past what streams usually draw
    for layer in cache.layers:
        assert layer._k.buffer.shape[-2] == layer._v.buffer.shape[-2] == 3 + FIRST_ROOM
        assert layer.get_seq_length() == 3
