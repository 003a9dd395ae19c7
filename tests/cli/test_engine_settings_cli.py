"""``serve`` and the engine's settings (docs/configuration.md): a bad ``LOCALSESSION_*`` engine
value stops it at start-up (exit 2, one line naming the variable and the accepted values, no
traceback), and the banner shows the options it runs with as one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from .cli_runner import Serving, one_error_line, run_cli


def test_a_bad_engine_setting_is_refused_at_start(tmp_path: Path) -> None:
    done = run_cli("serve", "--port", "0", "--home", str(tmp_path), LOCALSESSION_THREADS="many")
    line = one_error_line(done, "serve")
    assert "LOCALSESSION_THREADS='many': expected 'auto'" in line and "whole number" in line


def test_the_banner_shows_the_engine_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCALSESSION_DEVICE", raising=False)  # tests/engine's conftest sets it
    monkeypatch.setenv("LOCALSESSION_SHARED_PREFIX", "off")
    monkeypatch.setenv("LOCALSESSION_SNAPSHOT_CACHE_MB", "64")
    with Serving(tmp_path) as server:
        line = server.out.readline()
        while line and not line.startswith("# engine: "):
            line = server.out.readline()
    assert line.startswith("# engine: device=auto dtype=default threads=auto"), line
    assert " shared_prefix=off " in line and " snapshot_cache_mb=64 " in line
