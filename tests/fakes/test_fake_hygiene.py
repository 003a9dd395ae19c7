"""Import hygiene and packaging of the fakes, each in a fresh interpreter.

- the light tier (``FakeServiceClient()``) runs a whole loop (train, step, save, sample)
  with only the modules of :data:`ALLOWED` loaded: the standard library, localsession's
  torch-free modules, the fakes, and the SDK's pure-Python dependencies (botocore, pydantic);
  no torch, no transformers, no peft. What the interpreter itself loads before any code runs
  (a distribution's ``sitecustomize``, such as Debian's and Ubuntu's, and what it imports, or
  a ``.pth`` hook) is measured in a bare interpreter of the same environment and allowed;
- the numeric tier (``numerics=True``) loads torch but neither ``torch._dynamo`` (its AdamW
  is written in tensor ops) nor transformers nor peft;
- the real torch engine still imports in the same process afterwards (the fakes must not
  break ``localsession/engine/__init__.py``);
- the pytest plugin's fixtures work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: Third-party top-level packages the light tier may load (the SDK's own dependencies).
ALLOWED = frozenset(
    {
        "annotated_types",
        "botocore",
        "certifi",
        "dateutil",
        "fakes",
        "jmespath",
        "localsession",
        "pydantic",
        "pydantic_core",
        "six",
        "typing_extensions",
        "typing_inspection",
        "urllib3",
    }
)
#: localsession packages that need torch: the light tier must load none of them (a dot ends
#: each, so ``localsession.engine_options``, pure Python, is not one).
TORCH_PACKAGES = ("localsession.engine.", "localsession.numerics.")
TORCH_FREE_NUMERICS = frozenset({"localsession.numerics.inputs"})

LOOP = """
import json, sys
import fakes
from localsession.types import AdamParams, Datum, ModelInput, SamplingParams
with fakes.FakeServiceClient(numerics={numerics}) as fake:
    tc = fake.create_lora_training_client("fakes/bigram", rank=4)
    ids = tc.get_tokenizer().encode("hello")
    datum = Datum(model_input=ModelInput.from_ints(ids),
                  loss_fn_inputs={{"target_tokens": ids[1:] + [258], "weights": [1.0] * len(ids)}})
    tc.forward_backward([datum], "cross_entropy").result()
    tc.optim_step(AdamParams(learning_rate=1e-4)).result()
    tc.save_state().result()
    sampler = tc.save_weights_and_get_sampling_client()
    params = SamplingParams(max_tokens=512)
    sampler.sample(ModelInput.from_ints(ids), sampling_params=params).result()
    sampler.compute_logprobs(ModelInput.from_ints(ids)).result()
print(json.dumps(sorted(sys.modules)))
"""


def run(code: str, cwd: Path | None = None, path: Path | None = None) -> str:
    """``code`` in a fresh interpreter (``path`` prepended to ``PYTHONPATH``); its stdout."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _loaded(numerics: bool, path: Path | None = None) -> list[str]:
    out = run(LOOP.format(numerics=numerics), path=path)
    return list(json.loads(out.strip().splitlines()[-1]))


def _at_startup(path: Path | None = None) -> set[str]:
    """The modules a bare interpreter of this environment has loaded before any code runs."""
    out = run("import json, sys; print(json.dumps(sorted(sys.modules)))", path=path)
    return set(json.loads(out.strip().splitlines()[-1]))


def _check_light_tier(path: Path | None = None) -> None:
    startup = _at_startup(path)
    modules = _loaded(numerics=False, path=path)
    stdlib = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    third_party = {
        m.split(".")[0]
        for m in modules
        if not m.startswith("_") and m.split(".")[0] not in stdlib and m not in startup
    }
    assert third_party <= ALLOWED, sorted(third_party - ALLOWED)
    torch_modules = [
        m
        for m in modules
        if (m == "localsession.engine" or m.startswith(TORCH_PACKAGES))
        and m not in TORCH_FREE_NUMERICS
    ]
    assert torch_modules == []
    assert "torch" not in startup  # what startup loads is allowed, so it must not be torch


def test_light_tier_loads_only_the_allowlist() -> None:
    _check_light_tier()


def test_light_tier_check_allows_a_distribution_sitecustomize(tmp_path: Path) -> None:
    """Debian and Ubuntu ship a ``sitecustomize`` that imports ``apport_python_hook``; the
    interpreter loads both before the loop, and the check must not count them against it."""
    (tmp_path / "apport_python_hook.py").write_text("def install() -> None:\n    pass\n")
    (tmp_path / "sitecustomize.py").write_text(
        "try:\n    import apport_python_hook\nexcept ImportError:\n    pass\n"
        "else:\n    apport_python_hook.install()\n"
    )
    assert {"sitecustomize", "apport_python_hook"} <= _at_startup(tmp_path)
    _check_light_tier(tmp_path)


def test_numeric_tier_loads_torch_but_not_dynamo_transformers_or_peft() -> None:
    modules = set(_loaded(numerics=True))
    assert "torch" in modules
    assert not {"torch._dynamo", "transformers", "peft"} & modules


def test_the_real_engine_still_imports_after_the_fakes() -> None:
    fake_op = (
        "import fakes\n"
        "with fakes.FakeServiceClient(numerics=True) as f:\n"
        "    f.create_lora_training_client('m', rank=4).optim_step().result()\n"
    )
    engine = (
        "from localsession.engine import create_engine, TorchEngine\n"
        "assert callable(create_engine) and TorchEngine.__name__ == 'TorchEngine'\n"
    )
    run(fake_op + engine)


def test_pytest_plugin_fixtures(tmp_path: Path) -> None:
    (tmp_path / "test_loop.py").write_text(
        "import pytest\n"
        "from localsession.types import AdamParams\n"
        "def test_step(fake_service, fake_training_client):\n"
        "    fake_training_client.optim_step(AdamParams(learning_rate=1e-4)).result()\n"
        "    assert fake_service.calls.methods() == ['optim_step']\n"
        "@pytest.mark.fake_manual\n"
        "def test_manual(fake_service, fake_training_client):\n"
        "    future = fake_training_client.optim_step(AdamParams(learning_rate=1e-4))\n"
        "    with pytest.raises(TimeoutError):\n"
        "        future.result(timeout=0.05)\n"
        "    fake_service.advance()\n"
        "    future.result(timeout=5)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "fakes.pytest_plugin", "test_loop.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout
