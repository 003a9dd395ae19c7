"""Configuration mistakes stop ``localsession serve`` at start-up: exit 2, one line on stderr
that names the offending setting and its fix, no traceback (issue 21, item 2)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from .cli_runner import Serving, control_plane, one_error_line, run_cli


@pytest.mark.parametrize(
    ("entry", "fix"),
    [
        ("=x", "expected NAME=TARGET"),
        ("a/b=", "expected NAME=TARGET"),
        ("justaname", "expected NAME=TARGET"),
        ("///=localsession/tiny", "NAME must contain letters or digits"),
        ("a/b=does/not-exist", "target 'does/not-exist' is not a built-in model"),
    ],
)
def test_a_bad_model_map_entry_is_refused(tmp_path: Path, entry: str, fix: str) -> None:
    done = run_cli("serve", "--port", "0", "--home", str(tmp_path), "--model-map", entry)
    line = one_error_line(done, "serve")
    assert fix in line and entry.split("=")[0] in line


def test_a_home_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    home = tmp_path / "a-file" / "home"
    line = one_error_line(run_cli("serve", "--port", "0", "--home", str(home)), "serve")
    assert str(home) in line and "not writable" in line and "--home" in line
    # The same home from the environment, not the flag.
    line = one_error_line(run_cli("serve", "--port", "0", home=home), "serve")
    assert str(home) in line and "LOCALSESSION_HOME" in line


def test_serve_home_reads_its_own_models_json(tmp_path: Path) -> None:
    home, other = tmp_path / "home", tmp_path / "other"
    home.mkdir()
    other.mkdir()
    (other / "models.json").write_text(json.dumps({"from/other": "localsession/tiny"}))
    (home / "models.json").write_text(json.dumps({"team/broken": "no/such-model"}))
    done = run_cli("serve", "--port", "0", "--home", str(home), home=other)
    line = one_error_line(done, "serve")
    assert f"{home / 'models.json'} entry 'team/broken'" in line, line
    assert "fix the target or remove the entry" in line
    # Fixed, the server lists DIR/models.json's names in its Hub, not the environment home's.
    (home / "models.json").write_text(json.dumps({"team/model": "localsession/tiny"}))
    with Serving(home) as server:
        listing = control_plane(
            server.url,
            "ListHubContents",
            {"HubName": "SageMakerPublicHub", "HubContentType": "Model"},
        )
    names = {c["HubContentName"] for c in listing["HubContentSummaries"]}  # type: ignore[attr-defined]
    assert "team-model" in names and "from-other" not in names, names


def test_a_port_in_use_is_named_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("serve", "--port", str(port), "--home", str(tmp_path))
    line = one_error_line(done, "serve")
    assert f"port {port} on 127.0.0.1 is already in use" in line and "--port 0" in line


def test_a_malformed_auth_value_is_one_line(tmp_path: Path) -> None:
    done = run_cli("serve", "--port", "0", "--home", str(tmp_path), "--auth", "no-colon")
    assert "ACCESS_KEY:SECRET" in one_error_line(done, "serve")


def test_a_malformed_environment_model_map_is_one_line(tmp_path: Path) -> None:
    bad = {"LOCALSESSION_MODEL_MAP": "openai/gpt-oss-20b"}
    line = one_error_line(run_cli("serve", "--port", "0", "--home", str(tmp_path), **bad), "serve")
    assert "LOCALSESSION_MODEL_MAP" in line and "'openai/gpt-oss-20b' is not NAME=TARGET" in line
    line = one_error_line(run_cli("models", home=tmp_path, **bad), "models")
    assert "LOCALSESSION_MODEL_MAP" in line and "NAME=TARGET" in line


def test_packages_on_a_home_that_cannot_exist_say_so_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    done = run_cli("packages", "list", home=tmp_path / "a-file" / "home")
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"no model packages under {tmp_path / 'a-file' / 'home'}"
