"""The shipped model's tokenizer through the unmodified SDK's ``get_tokenizer`` path inside
``localsession.mock()``: the first mock reads it out of the GGUF once (without dequantising a
weight), and a second mock, whose own Hugging Face cache starts empty, exports nothing: it
copies the machine-wide cached export. Exports are counted, not timed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import localsession
from localsession.engine import loading

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _sdk_tokenizer() -> Any:
    """The Hub describe that session creation makes, then the SDK's own tokenizer load."""
    import boto3
    from sagemaker.train.training_session import _utils

    from localsession.runtime.models.catalog import hub_content_name

    hub = boto3.client("sagemaker")
    hub.describe_hub_content(
        HubName="SageMakerPublicHub", HubContentType="Model", HubContentName=hub_content_name(SMOL)
    )
    return _utils.load_tokenizer(SMOL, hub, SMOL)


@pytest.mark.slow  # default-tier time (docs/development.md)
def test_a_second_mock_exports_no_tokenizer(
    shipped_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gguf

    monkeypatch.setenv("LOCALSESSION_CACHE", str(tmp_path / "cache"))  # empty: nothing cached
    exports: list[str] = []
    real_export = loading.export_tokenizer

    def counted(model: Any, directory: Path) -> None:
        exports.append(model.name)
        real_export(model, directory)

    def no_dequantising(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("reading the tokenizer dequantised a weight")

    monkeypatch.setattr(loading, "export_tokenizer", counted)
    monkeypatch.setattr(gguf, "dequantize", no_dequantising)
    with localsession.mock():
        first = _sdk_tokenizer()
    assert exports == [SMOL]
    with localsession.mock():
        second = _sdk_tokenizer()
    assert exports == [SMOL]  # the second mock exported nothing
    text = "<|im_start|>user\nWhat is 2 + 3?<|im_end|>"
    assert len(first) == len(second) == 49152
    assert first.encode(text) == second.encode(text)
    assert second.eos_token == "<|im_end|>"
