"""The code-RL sandbox refuses, and survives, adversarial programs, and cleans up after them.

Each test runs a hostile program and checks three things: the program did not get what it
wanted (the refusal), this process is unharmed and can run the next program (survival), and
the program's temporary directory is gone (cleanup). Limits are small so the suite is quick.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from localsession.sandbox import SandboxLimits, SandboxResult, run_python

FAST = SandboxLimits(wall_seconds=3.0, cpu_seconds=2, memory_bytes=256 * 2**20)


def run(program: str, limits: SandboxLimits = FAST) -> SandboxResult:
    result = run_python(program, limits)
    assert result.workdir and not os.path.exists(result.workdir), "temp dir left behind"
    # Survival: a well-behaved program still runs right after.
    follow_up = run_python("print(6 * 7)", FAST)
    assert follow_up.ok and follow_up.stdout.strip() == "42"
    return result


def test_good_program_passes_and_failing_tests_fail() -> None:
    ok = run("def f(x):\n    return x + 1\nassert f(1) == 2\nprint('passed')")
    assert ok.ok and ok.returncode == 0 and ok.stdout == "passed\n"
    bad = run("def f(x):\n    return x\nassert f(1) == 2")
    assert not bad.ok and bad.returncode == 1 and "AssertionError" in bad.stderr


def test_infinite_loop_is_killed_within_the_limits() -> None:
    started = time.perf_counter()
    result = run("while True:\n    pass")
    assert not result.ok
    assert result.signal in {"SIGKILL", "SIGXCPU"}
    assert time.perf_counter() - started < FAST.wall_seconds + 5


def test_cpu_limit_alone_stops_a_busy_loop() -> None:
    result = run("while True:\n    pass", SandboxLimits(wall_seconds=30, cpu_seconds=1))
    assert not result.ok and not result.timed_out and result.signal == "SIGXCPU"


def test_sleeping_forever_hits_the_wall_clock() -> None:
    result = run("import time\ntime.sleep(1000)", SandboxLimits(wall_seconds=1, cpu_seconds=5))
    assert result.timed_out and result.signal == "SIGKILL" and result.seconds < 5


def test_unbounded_allocation_fails_inside_the_sandbox() -> None:
    result = run("blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))")
    assert not result.ok
    assert "MemoryError" in result.stderr or result.signal is not None


def test_network_is_refused_and_nothing_reaches_a_local_listener() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    connected = threading.Event()

    def accept() -> None:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            try:
                conn, _ = listener.accept()
                connected.set()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept)
    thread.start()
    attempts = [
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)",
        f"import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', {port}))",
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)",
    ]
    try:
        for program in attempts:
            result = run(program + "\nprint('CONNECTED')")
            assert not result.ok and "CONNECTED" not in result.stdout, program
    finally:
        thread.join()
        listener.close()
    assert not connected.is_set(), "a sandboxed program reached a host socket"


def test_network_namespace_is_used_where_the_os_allows() -> None:
    result = run("print('hi')")
    assert set(result.isolation) >= {"cpu", "memory", "network_namespace"}
    if not result.isolation["network_namespace"]:
        pytest.skip("this OS refuses unshare(CLONE_NEWNET); the audit hook alone refuses sockets")


@pytest.mark.parametrize(
    "reader",
    [
        "open({path!r}).read()",
        "open('../' * 12 + {path!r}.lstrip('/')).read()",
        "import pathlib\npathlib.Path({path!r}).read_text()",
        "import os\nos.read(os.open({path!r}, os.O_RDONLY), 100)",
        "import os\nos.listdir({parent!r})",
        "import os\nos.symlink({path!r}, 'link')\nopen('link').read()",
        "import os\nos.chdir({parent!r})\nopen({name!r}).read()",
    ],
)
def test_files_outside_the_sandbox_cannot_be_read(tmp_path: Path, reader: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-TOKEN")
    code = reader.format(path=str(secret), parent=str(tmp_path), name=secret.name)
    result = run(f"data = {code}\nprint(data)" if "\n" not in code else code + "\nprint('READ')")
    assert not result.ok
    assert "TOP-SECRET" not in result.stdout + result.stderr and "READ" not in result.stdout
    assert "sandbox" in result.stderr


def test_writes_stay_inside_and_are_cleaned_up(tmp_path: Path) -> None:
    outside = tmp_path / "planted.txt"
    escape = run(f"open({str(outside)!r}, 'w').write('x')")
    assert not escape.ok and not outside.exists()
    inside = run(
        "import os\nos.mkdir('d')\nopen('d/f.txt', 'w').write('x' * 1000)\n"
        "os.chmod('d/f.txt', 0)\nos.chmod('d', 0o500)\nprint(os.listdir('d'))"
    )
    assert inside.ok and "f.txt" in inside.stdout  # and run() checked the dir is gone


def test_process_creation_is_refused_fork_bomb_included() -> None:
    for program in [
        "import os\nwhile True:\n    os.fork()",
        "import subprocess\nsubprocess.run(['true'])",
        "import os\nos.system('true')",
        "import os\nos.execv('/bin/true', ['true'])",
        "import multiprocessing\nmultiprocessing.Process(target=print).start()",
    ]:
        result = run(program + "\nprint('SPAWNED')")
        assert not result.ok and "SPAWNED" not in result.stdout, program


def test_environment_holds_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    result = run("import os\nprint(dict(os.environ))")
    assert result.ok and "hunter2" not in result.stdout and "AWS_" not in result.stdout


def test_output_is_capped() -> None:
    result = run("print('x' * 10**6)", SandboxLimits(output_bytes=1000, file_bytes=2**21))
    assert len(result.stdout) < 1100 and "[output truncated]" in result.stdout
