"""engine/cuda_attention.py: which setting turns cuDNN's SDPA off, checked on stated inputs
(the flag is torch's, recorded here; no GPU is needed to decide)."""

from __future__ import annotations

import pytest
import torch

from localsession.engine.cuda_attention import CUDNN_ATTENTION_ENV, configure
from localsession.port import EngineConfigError


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
        configure(CUDA)
        configure(CUDA)  # a second engine: already off, nothing set or logged again
    assert flag == [True, False]
    assert len(caplog.records) == 1 and CUDNN_ATTENTION_ENV in caplog.text


@pytest.mark.parametrize("value", ["off", "OFF ", "0", ""])
def test_the_off_spellings(flag: list[bool], monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(CUDNN_ATTENTION_ENV, value)
    configure(CUDA)
    assert flag == [True, False]


@pytest.mark.parametrize("value", ["on", "1"])
def test_on_leaves_torchs_choice(
    flag: list[bool], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(CUDNN_ATTENTION_ENV, value)
    configure(CUDA)
    assert flag == [True]


def test_a_cpu_engine_reads_and_sets_nothing(
    flag: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CUDNN_ATTENTION_ENV, "sometimes")  # not even read on the CPU
    configure(torch.device("cpu"))
    assert flag == [True]


def test_a_bad_value_names_the_variable_and_the_choices(
    flag: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CUDNN_ATTENTION_ENV, "sometimes")
    with pytest.raises(EngineConfigError) as caught:
        configure(CUDA)
    message = str(caught.value)
    assert CUDNN_ATTENTION_ENV in message and "'sometimes'" in message
    assert "off (the default" in message and "on (" in message
    assert flag == [True]
