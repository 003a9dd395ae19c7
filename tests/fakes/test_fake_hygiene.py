"""Import hygiene and packaging of the fakes, each in a fresh interpreter.

- ``import fakes`` imports neither torch, transformers nor peft; running ops on a fake loads
  torch but still neither transformers nor peft;
- the real torch engine still imports in the same process afterwards (the fakes defer
  ``localsession/engine/__init__.py``; they must not break it);
- the pytest plugin's fixtures work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "transformers", "peft")

FIRST_OP = """
import json, sys, time
t0 = time.perf_counter()
import fakes
after_import = sorted(m for m in {heavy!r} if m in sys.modules)
t1 = time.perf_counter()
from localsession.types import Datum, ModelInput, SamplingParams
with fakes.FakeServiceClient() as fake:
    tc = fake.create_lora_training_client("fakes/bigram", rank=4)
    ids = tc.get_tokenizer().encode("hello")
    datum = Datum(model_input=ModelInput.from_ints(ids),
                  loss_fn_inputs={{"target_tokens": ids[1:] + [258], "weights": [1.0] * len(ids)}})
    tc.forward_backward([datum], "cross_entropy").result()
    t2 = time.perf_counter()
    tc.create_sampling_client().sample(ModelInput.from_ints(ids),
        sampling_params=SamplingParams(max_tokens=512)).result()
after_ops = sorted(m for m in {heavy!r} if m in sys.modules)
print(json.dumps({{"after_import": after_import, "after_ops": after_ops,
                  "import_s": t1 - t0, "first_op_s": t2 - t0}}))
"""


def run(code: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_fakes_never_import_transformers_or_peft() -> None:
    report = json.loads(run(FIRST_OP.format(heavy=HEAVY)).strip().splitlines()[-1])
    assert report["after_import"] == []
    assert report["after_ops"] == ["torch"]
    print(f"import {report['import_s']:.2f}s, import + first op {report['first_op_s']:.2f}s")


def test_the_real_engine_still_imports_after_the_fakes() -> None:
    fake_op = (
        "import fakes\n"
        "with fakes.FakeServiceClient() as f:\n"
        "    f.create_lora_training_client('m', rank=4).optim_step().result()\n"
    )
    engine = (
        "from localsession.engine import create_engine, TorchEngine\n"
        "import localsession.engine.losses as losses, sys\n"
        "assert losses is sys.modules['localsession.engine.losses']\n"
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
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout
