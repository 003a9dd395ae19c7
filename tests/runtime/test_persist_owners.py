"""Session records on a home shared by several processes (runtime/sessions/persist.py): a service
never restores, or marks Failed, the live sessions of another running process; once that process
dies, however it dies, its live sessions come back Failed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from procio import Lines

from localsession.runtime.service import Service, ServiceConfig

# A second process: an in-process service with records on, one Running session, then it waits.
OTHER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from localsession.runtime.service import Service, ServiceConfig

    class Stub:
        def __init__(self, spec): self.spec = spec
        def close(self): pass

    service = Service(ServiceConfig(home=Path(sys.argv[1]), persist_sessions=True,
                                    engine_factory=Stub))
    service.resolve_base_model = lambda name: None
    service.create_training_session({
        "TrainingSessionName": "theirs", "LoraConfig": {"Rank": 4, "Alpha": 8},
        "ModelConfig": {"BaseModelArn": "localsession/tiny"}})
    assert service.wait_for_session("theirs", 10) == "Running"
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


class StubEngine:
    def __init__(self, spec: object) -> None:
        self.spec = spec

    def close(self) -> None:
        pass


def _service(home: Path) -> Service:
    service = Service(
        ServiceConfig(home=home, persist_sessions=True, engine_factory=StubEngine)  # type: ignore[arg-type]
    )
    service.resolve_base_model = lambda name: None  # type: ignore[method-assign]
    return service


def _names(service: Service) -> dict[str, str]:
    rows = service.list_training_sessions({})["TrainingSessionSummaries"]
    return {r["TrainingSessionName"]: r["TrainingSessionStatus"] for r in rows}


def test_a_live_process_keeps_its_sessions_and_a_dead_one_loses_them(tmp_path: Path) -> None:
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert Lines(other.stdout, "the other process").readline().strip() == "ready"
        record = tmp_path / "sessions" / "theirs.json"
        owner = json.loads(record.read_text())["owner"]
        assert owner.startswith(f"{other.pid}-")
        mine = _service(tmp_path)
        assert "theirs" not in _names(mine)  # not ours to list, restore or fail
        assert json.loads(record.read_text())["status"] == "Running"  # and not rewritten
        mine.close()
        other.send_signal(signal.SIGKILL)  # a crash: no clean shutdown, no record update
        other.wait(timeout=10)
        after = _service(tmp_path)
        assert _names(after) == {"theirs": "Failed"}
        assert not (tmp_path / "sessions" / ".owners" / f"{owner}.lock").exists()
        after.close()
    finally:
        if other.poll() is None:
            other.kill()
