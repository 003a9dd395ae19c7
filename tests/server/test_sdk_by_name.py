"""Base models by the names users type, through the unmodified SDK (issue 16, item 1).

``localsession serve --model-map openai/gpt-oss-20b=localsession/tiny`` with its printed
exports pasted into a fresh client process: the launch-post GRPO loop names
``openai/gpt-oss-20b`` and calls the SDK's own ``get_tokenizer()``; the same script runs
in-process after its import line is swapped. The server's home lies on a path the client
was never told about except through the exports, and the user's own Hugging Face cache is
never written.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from localsession import ServiceClient as LocalServiceClient
from localsession.engine.builtin import save_builtin
from localsession.server.hosting import ServerThread
from localsession.server.serve import ServeOptions, build_service, serve_exports

from .common import ROLE

SCRIPT = Path(__file__).parent / "scripts" / "launch_post_grpo.py"
MAPPED = "openai/gpt-oss-20b"
CACHED = "acme/cached-tiny"  # a model in the user's own HF cache


@dataclass
class Served:
    exports: dict[str, str]
    models: list[str]
    user_hf: Path
    user_hf_before: list[str]
    server_home: Path
    chat: str


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _client_env(tmp: Path, extra: dict[str, str]) -> dict[str, str]:
    """A fresh user shell: no localsession or HF variables, its own HOME, plus ``extra``."""
    home = tmp / "client-home"
    home.mkdir(exist_ok=True)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("LOCALSESSION_", "HF_", "AWS_"))
    }
    env.pop("TRANSFORMERS_OFFLINE", None)
    env.update({"HOME": str(home), "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    env.update(extra)
    return env


def _run(env: dict[str, str], args: list[str], cwd: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``serve --model-map openai/gpt-oss-20b=localsession/tiny`` over a home on its own path,
    with one real model in the user's HF cache; yields the exports it prints."""
    server_home = tmp_path_factory.mktemp("elsewhere") / "server-home"
    user_hf = tmp_path_factory.mktemp("user-hf")
    snapshot = user_hf / "models--acme--cached-tiny" / "snapshots" / "c0ffee"
    save_builtin("localsession/tiny", snapshot)
    (user_hf / "models--acme--cached-tiny" / "refs").mkdir()
    (user_hf / "models--acme--cached-tiny" / "refs" / "main").write_text("c0ffee")
    before = _tree(user_hf)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(user_hf))
        mp.delenv("LOCALSESSION_MODEL_MAP", raising=False)
        service = build_service(
            ServeOptions(home=server_home, model_map=[f"{MAPPED}=localsession/tiny"])
        )
        with ServerThread(service, long_poll=5.0) as url:
            local = LocalServiceClient(role_arn=ROLE, backend=service)
            with local.create_lora_training_client(base_model=MAPPED, rank=4) as tc:
                tok = tc.get_tokenizer()
                assert tok.name_or_path == MAPPED
                chat = tok.apply_chat_template(
                    [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
                )
            yield Served(
                serve_exports(url, service),
                local.list_base_models(),
                user_hf,
                before,
                server_home,
                chat,
            )
        service.close()


def test_exports_point_the_client_at_localsessions_own_hf_cache(served: Served) -> None:
    hf = Path(served.exports["HF_HUB_CACHE"])
    assert hf == (served.server_home / "hf-hub").resolve()
    assert served.exports["HF_HUB_OFFLINE"] == "1"
    assert hf != served.user_hf
    assert {MAPPED, CACHED, "localsession/tiny"} <= set(served.models)


def test_launch_post_grpo_by_name_over_the_wire(served: Served, tmp_path: Path) -> None:
    env = _client_env(tmp_path, served.exports)
    out = _run(env, [str(SCRIPT)], tmp_path)
    assert out["models"] == served.models  # SDK list over the wire == in-process list
    assert len(out["losses"]) == 2 and all(math.isfinite(v) for v in out["losses"])
    assert out["name_or_path"] == MAPPED
    assert out["hi"] == [257, 104, 105]  # the mapped model's (tiny's) tokenizer
    assert out["chat"] == served.chat  # the same chat template as the in-process tokenizer
    # The user's own HF cache gained nothing: no substitute openai/gpt-oss-20b anywhere.
    assert _tree(served.user_hf) == served.user_hf_before


def test_sdk_get_tokenizer_works_offline_for_every_listed_id(
    served: Served, tmp_path: Path
) -> None:
    """For each id the SDK lists: resolve it as create_lora_training_client does, then load
    the tokenizer exactly as the SDK's get_tokenizer() does (its own load_tokenizer)."""
    check = (
        "import json\n"
        "from sagemaker.train.training_session import ServiceClient\n"
        "from sagemaker.train.training_session._utils import load_tokenizer, resolve_base_model\n"
        f"sdk = ServiceClient(role_arn={ROLE!r}, s3_output_path='s3://b/o')\n"
        "hub = sdk._get_hub_client()\n"
        "out = {}\n"
        "for model in sdk.list_base_models():\n"
        "    arn, hf_id = resolve_base_model(model, hub)\n"
        "    tok = load_tokenizer(model, hub, hf_id)\n"
        "    out[model] = [hf_id, tok.name_or_path, tok.encode('hi', add_special_tokens=False)]\n"
        "print(json.dumps(out))\n"
    )
    env = _client_env(tmp_path, served.exports)
    out = _run(env, ["-c", check], tmp_path)
    assert sorted(out) == sorted(served.models)
    for model, (hf_id, name_or_path, hi) in out.items():
        assert hf_id == name_or_path == model
        assert hi  # every listed id has a working tokenizer
    assert out[MAPPED][2] == out[CACHED][2] == [104, 105]
    assert _tree(served.user_hf) == served.user_hf_before


@pytest.mark.slow  # default-tier time (docs/development.md)
def test_launch_post_grpo_in_process_after_swapping_the_import(tmp_path: Path) -> None:
    source = SCRIPT.read_text(encoding="utf-8")
    swapped = source.replace(
        "from sagemaker.train.training_session import (", "from localsession import ("
    )
    assert swapped != source
    script = tmp_path / "grpo_in_process.py"
    script.write_text(swapped, encoding="utf-8")
    env = _client_env(
        tmp_path,
        {
            "LOCALSESSION_MODEL_MAP": f"{MAPPED}=localsession/tiny",
            "LOCALSESSION_HOME": str(tmp_path / "ls-home"),
            "HF_HUB_CACHE": str(tmp_path / "empty-hf"),
            "HF_HUB_OFFLINE": "1",
            "AWS_DEFAULT_REGION": "us-west-2",  # as the user's AWS configuration gives it
        },
    )
    out = _run(env, [str(script)], tmp_path)
    assert MAPPED in out["models"] and out["models"] == sorted(out["models"], key=str.lower)
    assert len(out["losses"]) == 2 and all(math.isfinite(v) for v in out["losses"])
    assert out["name_or_path"] == MAPPED and out["hi"] == [257, 104, 105]
    assert not (tmp_path / "empty-hf").exists()
