"""The mock's lifetime: clean exit (also after an exception), decorators, nesting, threads."""

from __future__ import annotations

import os
import threading
import unittest
from pathlib import Path
from typing import Any

import pytest
from mock_blog import GROUP, ROLE, S3

import localsession
from localsession.mocking import hooks

ENDPOINT = "SAGEMAKER_TRAINING_SESSION_ENDPOINT"


def _state() -> dict[str, Any]:
    from botocore import handlers

    return {
        "env": dict(os.environ),
        "threads": {t.ident for t in threading.enumerate()},
        "handlers": list(handlers.BUILTIN_HANDLERS),
        "live": hooks.live(),
    }


def _train(ts: Any, stop: bool) -> Any:
    svc = ts.ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)
    tc = svc.create_lora_training_client("localsession-tiny", rank=4)
    tc.optim_step(ts.AdamParams(learning_rate=1e-3)).result()
    datum = ts.Datum(
        model_input=ts.ModelInput.from_ints([257, 1, 2]),
        loss_fn_inputs={"target_tokens": [1, 2, 3], "weights": [1.0] * 3},
    )
    tc.forward_backward([datum], "cross_entropy")  # left in flight on purpose
    if stop:
        tc.stop()
    return tc


def _ours(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith(("localsession", "AnyIO"))]


def test_clean_exit_after_an_exception() -> None:
    import sagemaker.train.training_session as ts

    with localsession.mock(engine="fake"):  # warm up: first-use side effects of torch etc.
        _train(ts, stop=True)
    before = _state()
    homes: list[Path] = []
    with pytest.raises(ZeroDivisionError), localsession.mock(engine="fake") as m:
        homes.append(m.home)
        assert os.environ[ENDPOINT] == m.url
        _train(ts, stop=True)
        1 / 0  # noqa: B018
    after = _state()
    assert not homes[0].exists()
    assert after["env"] == before["env"]
    assert after["handlers"] == before["handlers"] and not hooks.hook_installed()
    assert after["live"] == [] and hooks.live() == []
    leftover = [t.name for t in threading.enumerate() if t.ident not in before["threads"]]
    assert leftover == []


def test_the_mocks_threads_end_even_with_a_client_left_running() -> None:
    """A training client never stopped keeps the SDK's own submit thread while the user
    holds it; every thread the mock started still ends with the mock."""
    import sagemaker.train.training_session as ts

    before = {t.ident for t in threading.enumerate()}
    with localsession.mock(engine="fake"):
        held = _train(ts, stop=False)
        assert _ours([t.name for t in threading.enumerate()])
    leftover = [t.name for t in threading.enumerate() if t.ident not in before]
    assert _ours(leftover) == [], leftover
    del held


def test_given_home_is_kept_and_env_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENDPOINT, "https://user.example")
    monkeypatch.setenv("AWS_PROFILE", "someone")
    monkeypatch.delenv("LOCALSESSION_MODEL_MAP", raising=False)
    with localsession.mock(home=tmp_path / "h", model_map={"a/b": "localsession/tiny"}) as m:
        assert m.home == tmp_path / "h"
        assert "AWS_PROFILE" not in os.environ
        assert os.environ["LOCALSESSION_MODEL_MAP"] == "a/b=localsession/tiny"
        assert os.environ["AWS_ENDPOINT_URL_SAGEMAKER"] == m.url
    assert (tmp_path / "h").is_dir()
    assert os.environ[ENDPOINT] == "https://user.example"
    assert os.environ["AWS_PROFILE"] == "someone"
    assert "LOCALSESSION_MODEL_MAP" not in os.environ


def test_nested_mocks_keep_their_own_clients(socket_guard: None) -> None:
    import boto3

    def names(client: Any) -> list[str]:
        listed = client.list_training_sessions()["TrainingSessionSummaries"]
        return [s["TrainingSessionArn"].rsplit("/", 1)[1] for s in listed]

    def create(client: Any, name: str) -> None:
        client.create_training_session(
            TrainingSessionName=name,
            RoleArn=ROLE,
            ModelConfig={"BaseModelArn": "localsession-tiny"},
            LoraConfig={"Rank": 4, "Alpha": 8},
            ModelPackageGroupArn=GROUP,
            OutputConfig={"S3Location": {"Path": S3}},
        )

    with localsession.mock(engine="fake", model_map={"outer/x": "localsession/tiny"}) as outer:
        outer_client = boto3.client("sagemaker")
        with localsession.mock(engine="fake", model_map={"inner/y": "localsession/tiny"}) as inner:
            assert os.environ[ENDPOINT] == inner.url
            assert set(os.environ["LOCALSESSION_MODEL_MAP"].split(",")) == {
                "outer/x=localsession/tiny",
                "inner/y=localsession/tiny",
            }
            inner_client = boto3.client("sagemaker")
            create(inner_client, "in-inner")
            create(outer_client, "in-outer")
            assert names(inner_client) == ["in-inner"] and names(outer_client) == ["in-outer"]
        assert os.environ[ENDPOINT] == outer.url
        assert os.environ["LOCALSESSION_MODEL_MAP"] == "outer/x=localsession/tiny"
        assert names(outer_client) == ["in-outer"]
        with pytest.raises(Exception, match="has exited"):
            names(inner_client)
    assert ENDPOINT not in os.environ


def test_mocks_on_several_threads_stay_apart(socket_guard: None) -> None:
    import sagemaker.train.training_session as ts

    barrier = threading.Barrier(3)
    results: dict[int, Any] = {}

    def worker(i: int) -> None:
        try:
            with localsession.mock(engine="fake") as m:
                barrier.wait(timeout=60)  # every mock live before any client is made
                m.script.enqueue(*[f"thread {i}"] * 2)
                svc = ts.ServiceClient(
                    role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3
                )
                with svc.create_lora_training_client("localsession-tiny", rank=4) as tc:
                    sampler = tc.save_weights_and_get_sampling_client()
                    out = sampler.sample(
                        prompt=ts.ModelInput.from_ints([257, 1]),
                        num_samples=2,
                        sampling_params=ts.SamplingParams(max_tokens=512, seed=0),
                    ).result()
                    tok = tc.get_tokenizer()
                barrier.wait(timeout=60)  # nobody exits while another still works
                results[i] = (
                    [tok.decode(s.tokens, skip_special_tokens=True) for s in out.sequences],
                    len(m.service.list_training_sessions({})["TrainingSessionSummaries"]),
                )
        except BaseException as exc:  # noqa: BLE001 - reported below
            results[i] = exc
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert results == {i: ([f"thread {i}"] * 2, 1) for i in range(3)}
    assert hooks.live() == [] and ENDPOINT not in os.environ


def test_reentering_an_active_mock_is_refused() -> None:
    m = localsession.mock(engine="fake")
    with m, pytest.raises(RuntimeError, match="already active"):
        m.start()
    assert hooks.live() == []


@localsession.mock(engine="fake")
def _decorated() -> str:
    return os.environ[ENDPOINT]


def test_decorator_on_a_function() -> None:
    first, second = _decorated(), _decorated()
    assert first != second  # a fresh mock per call
    assert first.endswith(hooks.HOST_SUFFIX) and ENDPOINT not in os.environ


@localsession.mock(engine="fake")
class TestDecoratedClass:
    def test_inside_a_mock(self) -> None:
        assert len(hooks.live()) == 1
        assert os.environ[ENDPOINT] == hooks.live()[0].url  # type: ignore[attr-defined]

    def test_each_method_gets_its_own(self) -> None:
        assert len(hooks.live()) == 1


@localsession.mock(engine="fake")
class DecoratedTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.endpoint = os.environ[ENDPOINT]  # setUp runs inside the mock too

    def test_setup_and_test_share_the_mock(self) -> None:
        assert os.environ[ENDPOINT] == self.endpoint
        assert len(hooks.live()) == 1


def test_outside_the_decorated_class_nothing_is_live() -> None:
    assert hooks.live() == [] and ENDPOINT not in os.environ


def test_imports_stay_light() -> None:
    """``import localsession`` (which offers ``localsession.mock``) and the pytest plugin load
    neither torch nor the server stack; a mock imports them when it starts."""
    import subprocess
    import sys

    code = (
        "import sys, localsession, localsession.mocking.pytest_plugin\n"
        "assert callable(localsession.mock)\n"
        "heavy = ('torch', 'transformers', 'starlette', 'uvicorn', 'localsession.server',\n"
        "         'fakes')\n"
        "print(','.join(sorted(m for m in heavy if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    assert out.stdout.strip() == ""


def test_a_fake_mock_runs_the_blog_loop_without_torch() -> None:
    """``mock(engine="fake")`` through the launch post's whole loop (the SDK's get_tokenizer
    included) in a fresh interpreter: torch, transformers and the HTTP server (uvicorn) stay
    out of ``sys.modules``."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, localsession, mock_blog\n"
        "with localsession.mock(engine='fake',\n"
        "                       model_map={'openai/gpt-oss-20b': 'localsession/tiny'}):\n"
        "    observed = mock_blog.grpo(steps=2)\n"
        "assert observed, observed\n"
        "heavy = ('torch', 'transformers', 'uvicorn')\n"
        "print(','.join(m for m in heavy if m in sys.modules) or 'none')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "none", out.stdout


def test_hugging_face_settings_from_the_exports_are_scoped() -> None:
    """The Hugging Face settings ``serve`` exports (its own hub cache of exported tokenizers,
    offline) apply inside the mock, to the variables and to huggingface_hub's import-time
    copies, and are undone on exit."""
    from huggingface_hub import constants

    before = (constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE)
    env_before = {k: os.environ.get(k) for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE")}
    with localsession.mock(engine="fake") as m:
        exported = m.service.hub_cache  # shared by the live mocks: the env is process-wide
        assert constants.HF_HUB_CACHE == os.environ["HF_HUB_CACHE"] == str(exported)
        assert constants.HF_HUB_OFFLINE is True
    assert (constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE) == before
    assert not exported.exists()  # removed with the last mock
    assert {k: os.environ.get(k) for k in env_before} == env_before
