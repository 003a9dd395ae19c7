"""Checkpoint downloads through Tinker's own clients: the unmodified ``tinker checkpoint
download`` command and tinker-cookbook's ``weights.download`` fetch the adapter of a training
checkpoint (through a temporary ``save_weights_external`` export, age-encrypted by the
cookbook) and of an external weights checkpoint. What they write is loaded with peft onto
the same base model, independently of the server, and its log-probabilities equal the
server's ``forward``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
types = tinker.types

MODEL = "localsession/tiny"
TOKENS = [257, 84, 104, 101, 32, 102, 111, 120, 32, 106, 117, 109, 112, 115]


def peft_logprobs(adapter_dir: Path) -> list[float]:
    """log p(TOKENS[t + 1] | TOKENS[: t + 1]) under base + the downloaded adapter."""
    from localsession.engine.builtin import build_builtin

    base, _ = build_builtin(MODEL)
    model = peft.PeftModel.from_pretrained(base, str(adapter_dir))
    model.eval()
    with torch.no_grad():
        logits_TV = model(torch.tensor([TOKENS[:-1]])).logits[0].double()
    lp_TV = torch.log_softmax(logits_TV, dim=-1)
    return lp_TV.gather(1, torch.tensor(TOKENS[1:])[:, None])[:, 0].tolist()


@pytest.fixture
def trained(localsession_tinker: Any) -> Any:
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=5).result()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": TOKENS[1:], "weights": [1.0] * (len(TOKENS) - 1)},
    )
    for _ in range(3):
        tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    server = tc.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"]
    yield tc, server.tolist()
    sc.close("success").result()


def test_save_weights_external_lists_urls_and_serves_the_adapter(
    trained: Any, tmp_path: Path
) -> None:
    import urllib.request

    tc, server = trained
    path = tc.save_weights_external("hf").result().path
    assert path == f"tinker://{tc.model_id}/external_weights/hf"
    rest = tinker.RestClient()
    listed = {
        c.tinker_path: c.checkpoint_type
        for c in rest.list_checkpoints(tc.model_id).result().checkpoints
    }
    assert listed[path] == "external"
    answer = rest.get_external_weights_urls(path).result()
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(answer.urls)
    for name, url in answer.urls.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=60) as response:  # no API key
            (tmp_path / name).write_bytes(response.read())
    assert peft_logprobs(tmp_path) == pytest.approx(server, abs=1e-4)


def test_the_tinker_cli_downloads_a_training_checkpoint(
    trained: Any, tmp_path: Path, localsession_tinker: Any
) -> None:
    tc, server = trained
    path = tc.save_state("for-cli").result().path
    env = {**os.environ, **localsession_tinker.environment()}
    done = subprocess.run(
        [sys.executable, "-m", "tinker.cli", "checkpoint", "download", path]
        + ["--output", str(tmp_path), "--force"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    configs = list(tmp_path.rglob("adapter_config.json"))
    assert len(configs) == 1, list(tmp_path.rglob("*"))
    assert peft_logprobs(configs[0].parent) == pytest.approx(server, abs=1e-4)
    # the command deleted its temporary export
    rest = tinker.RestClient()
    kinds = [c.checkpoint_type for c in rest.list_checkpoints(tc.model_id).result().checkpoints]
    assert "external" not in kinds


def test_the_cookbook_helper_downloads_training_and_external_checkpoints(
    trained: Any, tmp_path: Path
) -> None:
    weights = pytest.importorskip("tinker_cookbook.weights")
    pytest.importorskip("pyrage")  # the helper encrypts a training checkpoint's export
    tc, server = trained
    training = tc.save_state("for-cookbook").result().path
    out = weights.download(tinker_path=training, output_dir=str(tmp_path / "training"))
    assert peft_logprobs(Path(out)) == pytest.approx(server, abs=1e-4)
    exported = tc.save_weights_external("for-cookbook").result().path
    out = weights.download(tinker_path=exported, output_dir=str(tmp_path / "external"))
    assert peft_logprobs(Path(out)) == pytest.approx(server, abs=1e-4)
