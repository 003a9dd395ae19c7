"""engine/cuda_attention.py: which setting turns cuDNN's SDPA off, checked on stated inputs
(torch's flag is recorded here; no GPU is needed to decide)."""

from __future__ import annotations

import pytest
import torch

from localsession.engine.cuda_attention import CUDNN_ATTENTION_ENV, configure, cudnn_allowed
from localsession.port import EngineConfigError, EngineSpec


@pytest.fixture
def flag(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """torch's cuDNN-SDPA flag, starting enabled; every value set is appended."""
    state = [True]
    monkeypatch.setattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: state[-1])
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", state.append)
    monkeypatch.delenv(CUDNN_ATTENTION_ENV, raising=False)
    return state


CUDA = torch.device("cuda")


def test_a_cuda_engine_turns_cudnn_off_by_default_once(
    flag: list[bool], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", "localsession.engine.cuda_attention"):
        configure(CUDA, cudnn_allowed())
        configure(CUDA, cudnn_allowed())  # a second engine: already off, nothing set again
    assert flag == [True, False]
    assert len(caplog.records) == 1 and CUDNN_ATTENTION_ENV in caplog.text


@pytest.mark.parametrize("value", ["off", "OFF ", "0", ""])
def test_the_off_spellings(flag: list[bool], monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(CUDNN_ATTENTION_ENV, value)
    configure(CUDA, cudnn_allowed())
    assert flag == [True, False]


@pytest.mark.parametrize("value", ["on", "1"])
def test_on_leaves_torchs_choice(
    flag: list[bool], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(CUDNN_ATTENTION_ENV, value)
    configure(CUDA, cudnn_allowed())
    assert flag == [True]


def test_a_cpu_engine_sets_nothing(flag: list[bool]) -> None:
    configure(torch.device("cpu"), cudnn_allowed())
    assert flag == [True]


def test_a_bad_value_fails_an_engine_before_it_loads(
    flag: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On any device, and naming the variable and the choices."""
    from localsession.engine import torch_engine

    def no_load(spec: object) -> None:
        raise AssertionError("loaded a model despite the bad setting")

    monkeypatch.setattr(torch_engine, "load_shared", no_load)
    monkeypatch.setenv(CUDNN_ATTENTION_ENV, "sometimes")
    with pytest.raises(EngineConfigError) as caught:
        torch_engine.TorchEngine(EngineSpec("localsession/tiny"))
    message = str(caught.value)
    assert CUDNN_ATTENTION_ENV in message and "'sometimes'" in message
    assert "off (the default" in message and "on (" in message
    assert flag == [True]
