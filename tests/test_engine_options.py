"""One engine config (engine_options.py): every engine variable parsed in one place, with one
error policy, read once by the wiring and carried on each session's ``EngineSpec``.

- Each variable's accepted spellings give the stated option; unset gives the dataclass's
  default; every bad value raises ``SettingError`` (a ``ValueError``) reading
  ``NAME='value': expected ...`` with the accepted values.
- No engine module reads the environment (an ``ast`` walk: no ``os.environ`` / ``getenv``
  but ``CXX`` for inductor's compiler), and no module outside engine_options.py names an
  engine variable in a read.
- The wiring's profiles put the environment's options on the config, ``fake_service`` the
  defaults; a session's spec carries the config's options; ``serve`` refuses a bad value
  with one line (exit 2) before binding, and prints the options in its banner.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from localsession import wiring
from localsession.engine_options import ENGINE_VARIABLES, EngineOptions, SettingError
from localsession.port import EngineSpec
from localsession.port_commands import SessionCommand
from localsession.runtime.config import ServiceConfig

ROOT = Path(__file__).resolve().parent.parent

#: variable -> [(raw text, the option it sets)]
GOOD = {
    "LOCALSESSION_DEVICE": [("cpu", "cpu"), (" CUDA ", "cuda"), ("auto", "auto")],
    "LOCALSESSION_DTYPE": [("bf16", "bf16"), ("float32", "fp32"), ("AUTO", "auto")],
    "LOCALSESSION_THREADS": [("auto", 0), ("3", 3), (" 12 ", 12)],
    "LOCALSESSION_COMPILE": [("off", ""), ("0", ""), ("1", "inductor"), ("aot_eager", "aot_eager")],
    "LOCALSESSION_LINEAR": [("onednn", "onednn"), ("off", "mkl"), ("MKL", "mkl")],
    "LOCALSESSION_FUSED_HEAD": [("off", False), ("0", False), ("on", True)],
    "LOCALSESSION_LORA_PRECISION": [("fp32", "fp32"), ("float32", "fp32"), ("mixed", "mixed")],
    "LOCALSESSION_CUDNN_ATTENTION": [("on", True), ("1", True), ("off", False)],
    "LOCALSESSION_SHARED_PREFIX": [("on", "on"), ("OFF", "off"), ("auto", "auto")],
    "LOCALSESSION_MAX_MEMORY": [("0=20GiB, cpu=48GiB", (("0", "20GiB"), ("cpu", "48GiB")))],
    "LOCALSESSION_DEVICE_MAP": [("balanced", "balanced"), ("sequential", "sequential")],
    "LOCALSESSION_OFFLOAD_DIR": [(" /scratch/off ", "/scratch/off")],
    "LOCALSESSION_MERGED_CACHE_MB": [("0", 0.0), ("1.5", 1.5)],
    "LOCALSESSION_PACKED_CACHE_MB": [("0", 0.0), (" 256 ", 256.0)],
    "LOCALSESSION_SNAPSHOT_CACHE_MB": [("64", 64.0)],
    "LOCALSESSION_DECODE": [("dynamic", "dynamic"), ("STATIC", "static")],
    "LOCALSESSION_DECODE_COMPILE": [("probe", "probe"), ("1", "on"), ("off", "off")],
}
BAD = {
    "LOCALSESSION_DEVICE": ["gpu"],
    "LOCALSESSION_DTYPE": ["fp16"],
    "LOCALSESSION_THREADS": ["0", "-1", "two", "1.5"],
    "LOCALSESSION_LINEAR": ["fast"],
    "LOCALSESSION_FUSED_HEAD": ["sometimes"],
    "LOCALSESSION_LORA_PRECISION": ["half"],
    "LOCALSESSION_CUDNN_ATTENTION": ["yes please"],
    "LOCALSESSION_SHARED_PREFIX": ["always"],
    "LOCALSESSION_MAX_MEMORY": ["20GiB", "gpu=1GiB", ","],
    "LOCALSESSION_DEVICE_MAP": ["greedy"],
    "LOCALSESSION_MERGED_CACHE_MB": ["lots", "-1", "nan"],
    "LOCALSESSION_PACKED_CACHE_MB": ["all", "-1", "inf"],
    "LOCALSESSION_SNAPSHOT_CACHE_MB": ["inf"],
    "LOCALSESSION_DECODE": ["growing"],
    "LOCALSESSION_DECODE_COMPILE": ["graphs"],
}


def test_every_engine_variable_is_covered_here() -> None:
    names = {v.name for v in ENGINE_VARIABLES}
    assert len(names) == 17 and set(GOOD) == names
    assert set(BAD) == names - {"LOCALSESSION_COMPILE", "LOCALSESSION_OFFLOAD_DIR"}  # free text


@pytest.mark.parametrize("name", sorted(GOOD))
def test_accepted_spellings(name: str) -> None:
    field = next(v.field for v in ENGINE_VARIABLES if v.name == name)
    assert field is not None
    for raw, want in GOOD[name]:
        options = EngineOptions.parse({name: raw})
        assert getattr(options, field) == want, raw
        others = {f: getattr(options, f) for f in vars(options) if f != field}
        assert others == {f: getattr(EngineOptions(), f) for f in others}  # nothing else moved
    assert getattr(EngineOptions.parse({name: ""}), field) == getattr(EngineOptions(), field)


@pytest.mark.parametrize("name", sorted(BAD))
def test_one_error_policy(name: str) -> None:
    accepted = next(v.accepted for v in ENGINE_VARIABLES if v.name == name)
    for raw in BAD[name]:
        with pytest.raises(SettingError) as caught:
            EngineOptions.parse({name: raw})
        assert str(caught.value) == f"{name}={raw!r}: expected {accepted}"
        assert isinstance(caught.value, ValueError)


def test_from_env_reads_only_engine_variables_then_overrides() -> None:
    env = {"LOCALSESSION_DTYPE": "bf16", "LOCALSESSION_HOME": "/x", "PATH": "/bin"}
    options = EngineOptions.from_env(env, threads=2)
    assert options == EngineOptions(dtype="bf16", threads=2)
    assert EngineOptions.from_env({}) == EngineOptions()


def test_the_one_line_and_the_json_form() -> None:
    options = EngineOptions.parse(
        {"LOCALSESSION_MAX_MEMORY": "cpu=2GiB", "LOCALSESSION_THREADS": "2"}
    )
    line = options.line()
    assert "\n" not in line and line.startswith("device=auto dtype=default threads=2 compile=off")
    assert "max_memory=cpu=2GiB" in line and "merged_cache_mb=512" in line
    as_json = options.as_dict()
    assert as_json["max_memory"] == "cpu=2GiB" and as_json["threads"] == 2
    assert set(as_json) == {f.name for f in dataclasses.fields(EngineOptions)}


# -- nothing else reads them ----------------------------------------------------------------


def _environment_reads(path: Path) -> list[tuple[int, str]]:
    """(line, key text) of each ``os.environ[...]``, ``os.environ.get(...)`` and ``getenv``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        key: ast.AST | None = None
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
            key = node.slice
        elif isinstance(node, ast.Call):
            callee = ast.unparse(node.func)
            if callee.endswith(("environ.get", "getenv", "environ.setdefault")) and node.args:
                key = node.args[0]
        if key is not None:
            found.append((node.lineno, ast.unparse(key)))
    return found


def test_no_engine_module_reads_the_environment() -> None:
    reads = {
        f"{path.name}:{line}": key
        for path in sorted((ROOT / "localsession" / "engine").glob("*.py"))
        for line, key in _environment_reads(path)
    }
    assert set(reads.values()) <= {"'CXX'"}, reads  # compiled.py: inductor's C++ compiler


def test_no_module_but_engine_options_reads_an_engine_variable() -> None:
    engine_names = {v.name for v in ENGINE_VARIABLES}
    offenders = []
    for path in sorted((ROOT / "localsession").rglob("*.py")):
        if path.name == "engine_options.py":
            continue
        text = path.read_text(encoding="utf-8")
        constants = {  # NAME_ENV = "LOCALSESSION_..." bindings, read through their name
            t.id: node.value.value
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        for line, key in _environment_reads(path):
            name = constants.get(key, key.strip("'\""))
            if name in engine_names:
                offenders.append(f"{path.relative_to(ROOT)}:{line} reads {name}")
    assert not offenders


def test_the_rule_catches_a_planted_read(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        'import os\nDTYPE_ENV = "LOCALSESSION_DTYPE"\nraw = os.environ.get(DTYPE_ENV, "")\n'
        'other = os.getenv("LOCALSESSION_THREADS")\nthird = os.environ["CXX"]\n'
    )
    assert _environment_reads(planted) == [
        (3, "DTYPE_ENV"),
        (4, "'LOCALSESSION_THREADS'"),
        (5, "'CXX'"),
    ]


# -- the wiring reads them once and carries them ---------------------------------------------


def test_the_profiles_carry_the_environments_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ENGINE_VARIABLES:  # only what is set here (tests/engine sets the device)
        monkeypatch.delenv(variable.name, raising=False)
    monkeypatch.setenv("LOCALSESSION_SHARED_PREFIX", "off")
    monkeypatch.setenv("LOCALSESSION_THREADS", "2")
    want = EngineOptions(shared_prefix="off", threads=2)
    assert ServiceConfig.from_env(home=tmp_path).engine_options == want
    built = wiring.build_service(ServiceConfig(home=tmp_path))
    try:
        assert built.config.engine_options == want
    finally:
        built.close()
    server = wiring.server_service(wiring.ServerOptions(home=tmp_path / "s"))
    try:
        assert server.config.engine_options == want
    finally:
        server.close()
    chosen = wiring.server_service(
        wiring.ServerOptions(home=tmp_path / "c", engine=EngineOptions(dtype="fp32"))
    )
    try:
        assert chosen.config.engine_options == EngineOptions(dtype="fp32")  # given: env unread
    finally:
        chosen.close()
    fake = wiring.fake_service(lambda spec: None, home=tmp_path / "f")  # type: ignore[arg-type,return-value]
    try:
        assert fake.config.engine_options == EngineOptions()  # hermetic: nothing read
    finally:
        fake.close()


def test_a_sessions_spec_carries_the_configs_options(tmp_path: Path) -> None:
    seen: list[EngineSpec] = []

    class Recorder:
        def __init__(self, spec: EngineSpec) -> None:
            seen.append(spec)

        def close(self) -> None:
            pass

    options = EngineOptions(shared_prefix="on", snapshot_cache_mb=8.0)
    config = ServiceConfig(home=tmp_path, engine_factory=Recorder, engine_options=options)  # type: ignore[arg-type]
    service = wiring.build_service(config)
    try:
        service.create_session(
            SessionCommand(name="carried", base_model="localsession/tiny", rank=4, alpha=8)
        )
        assert service.wait_for_session("carried", 30) == "Running"
        assert [s.options for s in seen] == [options]
    finally:
        service.close()


def test_a_bad_service_variable_names_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALSESSION_MAX_SESSIONS", "four")
    with pytest.raises(SettingError, match=r"LOCALSESSION_MAX_SESSIONS='four': expected a whole"):
        ServiceConfig.from_env(home=tmp_path)
    monkeypatch.delenv("LOCALSESSION_MAX_SESSIONS")
    monkeypatch.setenv("LOCALSESSION_GAP_TIMEOUT", "soon")
    with pytest.raises(SettingError, match=r"LOCALSESSION_GAP_TIMEOUT='soon': expected seconds"):
        ServiceConfig.from_env(home=tmp_path)
