"""engine/cuda_attention.py: which setting turns cuDNN's SDPA off, checked on stated inputs
(torch's flag is recorded here; no GPU is needed to decide). The variable's spellings are
parsed by engine_options.py, as the wiring reads them."""

from __future__ import annotations

import pytest
import torch

from localsession.engine.cuda_attention import CUDNN_ATTENTION_ENV, configure
from localsession.engine_options import EngineOptions, SettingError


@pytest.fixture
def flag(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """torch's cuDNN-SDPA flag, starting enabled; every value set is appended."""
    state = [True]
    monkeypatch.setattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: state[-1])
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", state.append)
    return state


CUDA = torch.device("cuda")


def allowed(raw: str | None) -> bool:
    """The option ``LOCALSESSION_CUDNN_ATTENTION=raw`` sets (``None``: unset)."""
    return EngineOptions.parse({} if raw is None else {CUDNN_ATTENTION_ENV: raw}).cudnn_attention


def test_a_cuda_engine_turns_cudnn_off_by_default_once(
    flag: list[bool], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", "localsession.engine.cuda_attention"):
        configure(CUDA, allowed(None))
        configure(CUDA, allowed(None))  # a second engine: already off, nothing set again
    assert flag == [True, False]
    assert len(caplog.records) == 1 and CUDNN_ATTENTION_ENV in caplog.text


@pytest.mark.parametrize("value", ["off", "OFF ", "0", ""])
def test_the_off_spellings(flag: list[bool], value: str) -> None:
    configure(CUDA, allowed(value))
    assert flag == [True, False]


@pytest.mark.parametrize("value", ["on", "1"])
def test_on_leaves_torchs_choice(flag: list[bool], value: str) -> None:
    configure(CUDA, allowed(value))
    assert flag == [True]


def test_a_cpu_engine_sets_nothing(flag: list[bool]) -> None:
    configure(torch.device("cpu"), allowed(None))
    assert flag == [True]


def test_a_bad_value_names_the_variable_and_the_choices(flag: list[bool]) -> None:
    with pytest.raises(SettingError) as caught:
        allowed("sometimes")
    message = str(caught.value)
    assert CUDNN_ATTENTION_ENV in message and "'sometimes'" in message
    assert "off (the default" in message and "on (" in message
    assert flag == [True]
