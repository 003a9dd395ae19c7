"""The slow tier of the Tinker dialect: SmolLM2-135M through the unmodified SDK, and
tinker-cookbook 0.6.1 recipes, unmodified, against the dialect's server (the
``localsession_tinker`` fixture).

The recipes run in a subprocess with a Python that has ``tinker_cookbook`` installed: this
interpreter, or the one ``LOCALSESSION_COOKBOOK_PYTHON`` names (the cookbook needs
``tml-renderers>=0.4.1``, which the project's package index lacks, so it is installed with
``--no-deps`` into a separate environment; docs/tinker.md). ``math_rl`` arithmetic runs on
SmolLM2-135M. The others run on the tiny model under the name ``Qwen/Qwen3-4B-Instruct-2507``
(the server's model map): ``sl_loop`` takes no renderer option and asks the cookbook's model
table for the name's renderer (``qwen3_instruct``, the tiny model's chat format), and the
multi-turn ``guess_number`` takes seconds there instead of many minutes. ``rl_loop`` runs
under its own default name, ``Qwen/Qwen3.5-9B-Base``, mapped to the tiny model too (the table
gives it the ``role_colon`` renderer, which needs no special tokens).
``guess_number`` also runs with its defaults as they are (``Qwen/Qwen3.5-4B``, a ``qwen3_5``
renderer) on ``localsession/tiny-think``, the built-in whose tokenizer has the think tokens.
Recipes that hard-code a Hub dataset (``sl_loop``: no_robots, ``rl_loop``: gsm8k,
``rl_numerics_check``: wikitext) run in a directory holding small local stand-ins under the
same names (hub_mirror.py), with ``HF_DATASETS_OFFLINE=1``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hub_mirror import write_hub_mirror

from localsession.runtime.models.sources import shipped_model_file

tinker = pytest.importorskip("tinker")
types = tinker.types

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: A name the cookbook's model table knows (renderer ``qwen3_instruct``), served by the tiny model.
TINY = "Qwen/Qwen3-4B-Instruct-2507"
#: rl_loop's default model; its renderer (role_colon) needs no special tokens: the tiny model.
RL_LOOP_BASE = "Qwen/Qwen3.5-9B-Base"
#: A Qwen3.5 name (renderers qwen3_5*: <think> and </think> must be single tokens), served by
#: the built-in that has them.
QWEN3_5 = "Qwen/Qwen3.5-4B"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.localsession_tinker(
        model_map={
            TINY: "localsession/tiny",
            RL_LOOP_BASE: "localsession/tiny",
            QWEN3_5: "localsession/tiny-think",
        }
    ),
]
# Found by its file (the wheel's package imports `llm`, which is not installed): never imported.
needs_smol = pytest.mark.skipif(
    shipped_model_file(SMOL) is None,
    reason="the shipped SmolLM2 GGUF is not installed (make demo installs it)",
)


@needs_smol
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
    # the recipes' own imports too: a --no-deps install of the cookbook alone imports, but
    # its recipes need chz and datasets (docs/tinker.md)
    probe = subprocess.run(
        [chosen, "-c", "import tinker_cookbook, chz, datasets"], capture_output=True, timeout=120
    )
    if probe.returncode != 0:
        pytest.skip(f"tinker_cookbook with its recipes' dependencies is not importable by {chosen}")
    return chosen


RL_TINY = ("group_size=2", "max_tokens=8")  # and lora_rank=8, save_every=0 where offered
#: recipe -> (base model, module and arguments); each run also gets max_steps=2 and log_path.
RECIPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "math_rl_arithmetic": (
        SMOL,
        (
            "tinker_cookbook.recipes.math_rl.train",
            "renderer_name=qwen3_instruct",  # SmolLM2 is not in the cookbook's model table
            "env=arithmetic",
            "lora_rank=8",  # its default loss_fn, stable_reinforce
            "group_size=4",
            "groups_per_batch=4",
            "max_tokens=5",
            "eval_every=0",
            "save_every=0",
        ),
    ),
    "guess_number": (
        TINY,
        (
            "tinker_cookbook.recipes.multiplayer_rl.guess_number.train",
            "renderer_name=qwen3_instruct",  # its default is a Qwen3.5 renderer
            "batch_size=2",
            "eval_every=0",
            "save_every=0",
            *RL_TINY,
        ),
    ),
    # its defaults as they are: Qwen3.5-4B and the qwen3_5_disable_thinking renderer
    "guess_number_qwen3_5": (
        QWEN3_5,
        (
            "tinker_cookbook.recipes.multiplayer_rl.guess_number.train",
            "batch_size=2",
            "eval_every=0",
            "save_every=0",
            *RL_TINY,
        ),
    ),
    "preference_shorter": (
        TINY,
        (
            "tinker_cookbook.recipes.preference.shorter.train",
            "renderer_name=qwen3_instruct",
            "batch_size=2",
            "eval_every=0",
            *RL_TINY,
        ),
    ),
    "rl_numerics_check": (
        TINY,
        (
            "tinker_cookbook.recipes.rl_numerics_check.train",
            "groups_per_batch=2",
            # One page of 200 characters: a corpus of a few thousand characters suffices.
            "task.num_pages_min=1",
            "task.num_pages_max=1",
            "task.page_chars=200",
            "lora_rank=8",
            "save_every=0",
            *RL_TINY,
        ),
    ),
    "sl_loop": (
        TINY,
        ("tinker_cookbook.recipes.sl_loop", "batch_size=2", "lora_rank=8", "save_every=0"),
    ),
    # Self-distillation: the teacher's top-K prompt logprobs as (N, K) cross-entropy targets.
    "sdft": (
        TINY,
        (
            "tinker_cookbook.recipes.sdft.train",
            "dataset=sciknoweval",
            "groups_per_batch=2",
            "topk=4",
            "lora_rank=8",
            "max_tokens=8",
            "eval_every=0",
            "save_every=0",
            "behavior_if_log_dir_exists=delete",
        ),
    ),
    # its default loss, stable_reinforce: samples with record_stability_info=True
    "rl_loop": (
        RL_LOOP_BASE,
        (
            "tinker_cookbook.recipes.rl_loop",
            "batch_size=2",
            "lora_rank=8",
            "save_every=0",
            *RL_TINY,
        ),
    ),
    "rl_loop_gspo": (
        RL_LOOP_BASE,
        (
            "tinker_cookbook.recipes.rl_loop",
            "loss_fn=gspo",
            "batch_size=2",
            "lora_rank=8",
            "save_every=0",
            *RL_TINY,
        ),
    ),
    # stable_reinforce on rubric-graded addition; the grader is the tiny model too (its default
    # grader is a Qwen3.5 model, whose renderer needs <think> tokens the tiny model lacks)
    "rubric": (
        TINY,
        (
            "tinker_cookbook.recipes.rubric.train",
            "renderer_name=qwen3_instruct",
            f"grader_llm_name={TINY}",
            "grader_renderer_name=qwen3_instruct",
            "groups_per_batch=2",
            "train_group_size=2",
            "max_tokens=8",
            "lora_rank=8",
            "eval_every=0",
            "save_every=0",
        ),
    ),
}


def _per_step(rows: list[dict[str, Any]], key: str) -> list[float]:
    """``key``'s value at steps 0 and 1, each finite."""
    logged = [(row["step"], row[key]) for row in rows if key in row]
    assert [step for step, _ in logged] == [0, 1], (key, logged)
    values = [float(value) for _, value in logged]
    assert all(math.isfinite(v) for v in values), (key, values)
    return values


def _check_metrics(recipe: str, rows: list[dict[str, Any]]) -> None:
    if recipe == "sl_loop":
        assert _per_step(rows, "num_sequences") == [2.0, 2.0]
        # Per-token NLL of a barely trained model: near ln(vocabulary 259) = 5.56.
        assert all(0.0 < nll < 2 * math.log(259) for nll in _per_step(rows, "train_mean_nll"))
    elif recipe == "sdft":
        # two datums a step, each trained on the teacher's top-4 as (N, 4) targets
        assert _per_step(rows, "sdft/num_datums") == [2.0, 2.0]
        assert _per_step(rows, "sdft/topk") == [4.0, 4.0]
    elif recipe.startswith("rl_loop"):
        # Its reward needs a \boxed{N} answer, which the tiny model never writes: every group
        # has zero advantages and the recipe skips its optimizer steps (it says so).
        assert _per_step(rows, "reward/total") == [0.0, 0.0]
    else:  # tinker_cookbook.rl.train
        episodes = 16 if recipe == "math_rl_arithmetic" else 4
        assert _per_step(rows, "env/all/total_episodes") == [episodes, episodes]
        _per_step(rows, "env/all/reward/total")
        # The sampler's logprobs of the sampled tokens agree with the trainer's.
        assert all(abs(kl) < 1e-3 for kl in _per_step(rows, "optim/kl_sample_train_v1"))


@pytest.mark.parametrize(
    "recipe",
    [pytest.param(r, marks=needs_smol) if RECIPES[r][0] == SMOL else r for r in RECIPES],
)
def test_cookbook_recipe_runs_unmodified(
    recipe: str, localsession_tinker: Any, tmp_path: Path
) -> None:
    python = _cookbook_python()
    model, (module, *args) = RECIPES[recipe]
    write_hub_mirror(tmp_path)  # the working directory: load_dataset("openai/gsm8k") finds it
    if recipe == "rubric":  # the recipe's own data step, offline: writes ./tinker_cookbook/...
        (tmp_path / "tinker_cookbook" / "example_data").mkdir(parents=True)
        data = [python, "-m", "tinker_cookbook.recipes.rubric.generate_data"]
        subprocess.run(data, cwd=tmp_path, check=True, capture_output=True, timeout=300)
    log_dir = tmp_path / "log"
    command = [python, "-m", module, f"model_name={model}", "max_steps=2", f"log_path={log_dir}"]
    env = {
        **os.environ,
        **localsession_tinker.environment(),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),  # the datasets cache; HF_HUB_CACHE is the server's
    }
    done = subprocess.run(
        [*command, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    _check_metrics(recipe, rows)
    # The recipe's final checkpoint is the server's, on a model of the intended base.
    final = json.loads((log_dir / "checkpoints.jsonl").read_text().splitlines()[-1])
    model_id = final["state_path"].removeprefix("tinker://").split("/")[0]
    rest = tinker.RestClient()
    assert rest.get_training_run(model_id).result().base_model == model
    listed = {c.tinker_path for c in rest.list_checkpoints(model_id).result().checkpoints}
    assert {final["state_path"], final["sampler_path"]} <= listed


def test_cookbook_math_rl_example_smoke(tmp_path: Path) -> None:
    """examples/cookbook_math_rl.py (its own ``serve``, the recipe unmodified) on the tiny
    model: the recipe's two steps are read back into the summary."""
    python = _cookbook_python()
    example = Path(__file__).resolve().parents[2] / "examples" / "cookbook_math_rl.py"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home")}
    done = subprocess.run(
        [sys.executable, str(example), "--smoke", "--python", python, "--run-dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 2
    assert all(math.isfinite(v) for v in summary.values())
    assert -0.1 <= summary["reward_first5"] <= 1.0 and 0.0 <= summary["correct_last5"] <= 1.0
