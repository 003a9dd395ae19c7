"""bench/bandwidth.py's arithmetic (bench/gpu_decode.py's check 7), checked against hand
computations: the bytes a decode step must read, the bandwidth fraction, the device table;
and that the ``generate`` baseline runs on the engine's own base tensors. (The check's rows'
structure is checked by the gpu_check dry run in test_bench_smoke.py.)"""

from __future__ import annotations

import pytest

from bench import bandwidth, gpu_decode
from bench.bandwidth import (
    StepBytes,
    bandwidth_fraction,
    decode_bytes,
    kv_bytes_per_token,
    table_bandwidth,
)

torch = pytest.importorskip("torch")


def test_decode_bytes_by_hand() -> None:
    # 4 new tokens: the prefill makes token 1, then decode steps j = 1, 2, 3; step j reads
    # the weights (1000), one embedding row per stream (3 × 2) and each stream's cache at
    # length prompt + j = 6, 7, 8 tokens of 10 bytes: 3 × 1006 + 3 × 10 × (6 + 7 + 8)
    step = StepBytes(weights=1000, kv_per_token=10, embed_row=2)
    assert decode_bytes(step, streams=3, prompt_len=5, new_tokens=4) == 3018 + 630
    assert decode_bytes(step, streams=3, prompt_len=5, new_tokens=1) == 0  # prefill only
    # 3648 bytes at 1000 B/s take 3.648 s; measured 7.296 s: half the limit
    assert bandwidth_fraction(3648, 1000.0, 7.296) == pytest.approx(0.5)


def test_kv_bytes_of_the_gpu_models_by_hand() -> None:
    # 0.47B: 26 layers, 8 KV heads of 1024 / 16 = 64, bf16: K and V = 2 × 26 × 8 × 64 × 2
    assert kv_bytes_per_token(26, 8, 64, 2) == 53_248
    # 1.1B: 16 layers, 8 KV heads of 2048 / 32 = 64
    assert kv_bytes_per_token(16, 8, 64, 2) == 32_768


def test_step_bytes_of_a_small_llama_by_hand() -> None:
    """Hidden 128, MLP 256, 2 layers, 4 heads / 2 KV heads (head 32), vocabulary 32000,
    untied, bf16: per layer q, o 128×128, k, v 128×64, gate, up, down 128×256, two norms of
    128; then the final norm and the 32000×128 head. The input embedding is not counted
    whole: a step reads one 128-wide row of it per stream."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):  # sizes only: no memory, no init
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    layer = 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 256 + 2 * 128
    weights = 2 * (2 * layer + 128 + 32000 * 128)
    got = bandwidth.step_bytes(model, config)
    assert got == StepBytes(weights=weights, kv_per_token=2 * 2 * 2 * 32 * 2, embed_row=256)
    assert got.weights == 8_783_104
    # 4 streams, prompt 8, 3 new tokens: steps j = 1, 2 at cache lengths 9 and 10
    expected = 2 * (8_783_104 + 4 * 256) + 4 * 512 * (9 + 10)
    assert decode_bytes(got, 4, 8, 3) == expected == 17_607_168


@pytest.mark.parametrize(
    ("name", "gbps"),
    [
        ("NVIDIA H200", 4800.0),
        ("NVIDIA H100 80GB HBM3", 3350.0),
        ("NVIDIA H100 PCIe", 2000.0),
        ("NVIDIA A100-SXM4-80GB", 2039.0),
        ("NVIDIA A100-SXM4-40GB", 1555.0),
        ("NVIDIA L40S", 864.0),
        ("NVIDIA L4", 300.0),
        ("NVIDIA A10G", 600.0),
    ],
)
def test_bandwidth_table_matches_the_most_specific_name(name: str, gbps: float) -> None:
    assert table_bandwidth(name) == gbps * 1e9


def test_an_unknown_device_falls_back_to_a_measured_copy() -> None:
    assert table_bandwidth("cpu (dry run)") is None
    measured, source = bandwidth.card_bandwidth("cpu", "cpu (dry run)")
    assert source == "measured copy"
    assert 1e8 < measured < 1e13  # a memory copy's bytes/s, not a unit slip


def test_the_generate_baseline_runs_on_the_engines_own_base_tensors() -> None:
    from bench.gpu_check import llama_engine

    engine, config = llama_engine("gpu-check/test", "cpu", (64, 128, 2, 4, 2))
    try:
        twin = gpu_decode.plain_twin(engine.model, config, "cpu")
        base = {p.data_ptr() for n, p in engine.model.named_parameters() if "lora_" not in n}
        assert {p.data_ptr() for p in twin.parameters()} == base
        assert not any("lora" in n for n, _ in twin.named_parameters())
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("kinds", "failed", "ok"),
    [({"graph"}, set(), True), ({"graph", "eager"}, set(), False), ({"graph"}, {"auto"}, False)],
)
def test_the_graph_row_fails_when_any_step_ran_eagerly(
    kinds: set[str], failed: set[str], ok: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture that failed logs one line and decodes eagerly: the decode check's graph row
    says so, or the speed rows would time eager steps unawares."""
    from types import SimpleNamespace

    from localsession.engine import decode_step

    monkeypatch.setattr(decode_step, "_failed", failed)
    runner = SimpleNamespace(kinds={n: kind for n, kind in enumerate(sorted(kinds))})
    engine = SimpleNamespace(_sampler=SimpleNamespace(_runner=runner))
    row = gpu_decode.graph_row("0.47B", engine, dry=False)
    assert row.ok is ok and row.na is None
