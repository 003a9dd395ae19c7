"""The wiring's named profiles: each builds its frozen ``ServiceConfig`` once, with the
choices its door needs written in one place (localsession/wiring.py), and every door (serve,
``mock()``, the fakes, the in-process client) takes its service from one of them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from localsession import wiring
from localsession.engine_options import EngineOptions
from localsession.port import EngineSpec
from localsession.runtime.config import ServiceConfig
from localsession.server.serve import ServeOptions, build_service


def _no_engine(spec: EngineSpec) -> Any:
    raise AssertionError("no session is started here")


def test_a_config_is_frozen_and_from_env_refuses_unknown_names(tmp_path: Path) -> None:
    config = ServiceConfig(home=tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_sessions = 9  # type: ignore[misc]
    with pytest.raises(TypeError, match="max_sesions"):
        ServiceConfig.from_env(max_sesions=2)


def test_build_service_leaves_the_callers_config_as_it_was(tmp_path: Path) -> None:
    config = ServiceConfig(home=tmp_path)
    service = wiring.build_service(config)
    try:
        assert config.engine_factory is None and config.engine_options is None  # untouched
        assert service.config.engine_factory is wiring.default_engine_factory
        assert service.config.engine_options == EngineOptions.from_env()  # filled in, once
        filled = {"engine_factory": None, "engine_options": None}
        assert dataclasses.replace(service.config, **filled) == config
    finally:
        service.close()


def test_the_server_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALSESSION_MAX_SESSIONS", "7")
    monkeypatch.setenv("LOCALSESSION_GAP_TIMEOUT", "9")
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "")
    options = wiring.ServerOptions(
        home=tmp_path, strict=False, region="eu-west-1", model_map={"a/b": "localsession/tiny"}
    )
    service = wiring.server_service(options)
    try:
        config = service.config
        assert (config.persist_sessions, config.local_model_paths) == (True, False)
        assert (config.strict, config.region, config.home) == (False, "eu-west-1", tmp_path)
        assert (config.max_sessions, config.gap_timeout) == (7, 9.0)  # the environment's
        assert config.engine_factory is wiring.default_engine_factory
        assert "a/b" in service.catalog.names()
    finally:
        service.close()
    explicit = wiring.server_service(
        wiring.ServerOptions(home=tmp_path, max_sessions=2, gap_timeout=0.5)
    )
    try:
        assert (explicit.config.max_sessions, explicit.config.gap_timeout) == (2, 0.5)
    finally:
        explicit.close()


def test_serve_takes_the_server_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[wiring.ServerOptions] = []
    real = wiring.server_service

    def spy(options: wiring.ServerOptions, **kwargs: Any) -> Any:
        calls.append(options)
        return real(options, **kwargs)

    monkeypatch.setattr(wiring, "server_service", spy)
    service = build_service(ServeOptions(home=tmp_path, relaxed=True, lenient_sequence=True))
    try:
        assert [(o.home, o.strict, o.lenient_sequence) for o in calls] == [(tmp_path, False, True)]
        assert service.config.persist_sessions and service.config.lenient_sequence
    finally:
        service.close()


def test_the_inprocess_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALSESSION_GAP_TIMEOUT", "30")  # the profile's rule wins
    service = wiring.inprocess_service(home=tmp_path, max_sessions=3)
    try:
        config = service.config
        assert config.gap_timeout == wiring.INPROCESS_GAP_TIMEOUT == 0.0
        assert (config.home, config.max_sessions) == (tmp_path, 3)
        assert (config.persist_sessions, config.local_model_paths) == (False, True)
        assert config.engine_factory is wiring.default_engine_factory
    finally:
        service.close()


def test_the_fake_profile_reads_no_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALSESSION_MAX_SESSIONS", "2")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    service = wiring.fake_service(_no_engine, home=tmp_path, hub_cache=tmp_path / "hub")
    try:
        config = service.config
        assert config.engine_factory is _no_engine
        assert (config.max_sessions, config.region) == (wiring.FAKE_MAX_SESSIONS, "us-west-2")
        assert (config.gap_timeout, config.gather_quiet_s) == (0.0, 0.0)
        assert not config.check_create_members
        assert service.hub_cache == tmp_path / "hub"
    finally:
        service.close()


def test_the_mocks_take_their_profiles_whole(tmp_path: Path) -> None:
    """``mock()``'s region and hub cache are in its service's config from construction."""
    import localsession
    from localsession.mocking import hooks

    for engine in ("torch", "fake"):
        with localsession.mock(engine=engine, home=tmp_path / engine, region="eu-central-1") as m:  # type: ignore[arg-type]
            config = m.service.config
            assert config.region == "eu-central-1"
            assert config.hub_cache == hooks.shared_hub_cache()
            assert config.home == tmp_path / engine
            if engine == "torch":
                assert (config.persist_sessions, config.local_model_paths) == (True, False)
            else:
                assert config.gap_timeout == wiring.INPROCESS_GAP_TIMEOUT


def test_serve_idle_timeout_flag_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``serve --idle-timeout`` reaches the service's config, over LOCALSESSION_IDLE_TIMEOUT;
    a negative or non-numeric value stops the command line naming the option."""
    from localsession.cli import _parser
    from localsession.parity.running import check_replay_options
    from localsession.server.startup import StartupError

    monkeypatch.setenv("LOCALSESSION_IDLE_TIMEOUT", "7")
    args = vars(_parser().parse_args(["serve", "--idle-timeout", "2.5"]))
    options = ServeOptions(
        **{**{k: v for k, v in args.items() if k != "command"}, "home": tmp_path}
    )
    timeouts = []
    for given in (options, ServeOptions(home=tmp_path)):
        service = build_service(given)
        timeouts.append(service.config.idle_timeout)
        service.close()
    assert timeouts == [2.5, 7.0]
    for bad in ("-1", "soon", "inf"):
        with pytest.raises(SystemExit) as stopped:
            _parser().parse_args(["serve", "--idle-timeout", bad])
        assert stopped.value.code == 2
        assert "--idle-timeout" in capsys.readouterr().err.splitlines()[-1]
    with pytest.raises(StartupError, match="--idle-timeout has no effect with --replay"):
        check_replay_options(dataclasses.replace(options, replay=tmp_path))
