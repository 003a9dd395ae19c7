"""``make conformance-peers``: install third-party Tinker servers in their own venvs, start
each on this CPU and run ``conformance/suite_tinker`` against it (docs/peers.md).

Peers:

- **tuft** (TuFT 0.2.2, ``pip install tuft``): transformers + peft training in Ray actors.
  Ray is started with one *logical* GPU (``ray start --num-gpus=1``; no CUDA is used) and
  the model is declared ``capabilities: [training]``, so no vLLM sampler starts. TuFT
  accepts tinker SDKs up to 0.28.1, so the suite runs from a second venv with
  ``tinker==0.28.1`` (its run with the repo's 0.38 stops at the wire probe).
- **skyrl-tx** (0.3.0): installed with its ``tinker`` extra and a CPU JAX (its ``jax``
  extra wants ``jax[cuda12]`` on Linux); ``python -m tx.tinker.api`` serves the tiny
  model's exported directory. Its routes (``tx/tinker/api.py``) have no
  ``/api/v1/client/config``, which tinker 0.28 and later call before any request, and no
  ``/api/v1/sessions/{id}/finish``: the suite runs from a venv with ``tinker==0.16.1``
  (:data:`SKYRL_SDK`), which calls neither.

Every test reaches a verdict: ``--op-timeout`` bounds each ``result()`` and
``conformance/peers/deadline.py``'s ``--test-timeout`` each test (a hang is that test's
failure, with where it waited, and the run goes on; after a hang it could not stop, the
suite starts again without the tests already reported). Peers run one at a time.

Everything lives under ``--dir`` (default ``$LOCALSESSION_PEERS``, else
``~/.cache/localsession-peers``): venvs, the exported model, logs and one JSON report per
run (``<peer>-<sdk>.json``, with a ``"run"`` entry: peer, versions, wall time, the box's
load). A venv that is already there with its packages installed is reused as it is. At the
end (unless ``--no-record``) the reports are copied into ``conformance/peers/reports/`` and
docs/peers.md's generated blocks are rendered from them (``report_peers.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from conformance.peers.runkit import LoadSampler, merge, start_ray, version, watch

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "conformance" / "suite_tinker"
MODEL = "localsession/tiny"
KEY = "tml-conformance"
OLD_SDK = "0.28.1"
#: The newest tinker SDK here that skyrl-tx 0.3.0 answers (see the module docstring).
SKYRL_SDK = "0.16.1"


def sh(args: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
    """Run ``args`` to completion, appending its output to ``log``; raise on failure."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(args)}\n")
        out.flush()
        subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=env, check=True)


def venv(path: Path, packages: Sequence[str], log: Path) -> Path:
    """``path``'s python, the venv created and ``packages`` installed the first time."""
    python = path / "bin" / "python"
    stamp = path / ".installed"
    if not stamp.exists() and python.exists() and installed(python, packages):
        stamp.write_text(" ".join(packages))  # made by hand, or by a run that was stopped
    if not stamp.exists():
        sh([sys.executable, "-m", "venv", str(path)], log)
        sh([str(python), "-m", "pip", "install", "--quiet", *packages], log)
        stamp.write_text(" ".join(packages))
    return python


def installed(python: Path, packages: Sequence[str]) -> bool:
    """Whether ``python``'s environment has a distribution of each requirement (any
    version: the stamp, not this check, pins what run_peers itself installs)."""
    names = [re.split(r"[\[<>=!~ ;]", package, maxsplit=1)[0] for package in packages]
    shown = subprocess.run([str(python), "-m", "pip", "show", "--quiet", *names],
                           capture_output=True, check=False)  # fmt: skip
    return shown.returncode == 0


def client_venv(base: Path, sdk: str, log: Path) -> Path:
    """A venv with ``tinker==sdk``, pytest and hypothesis; the rest (torch, transformers,
    this repo's deps) comes from the running interpreter's site-packages, after its own."""
    python = venv(base / f"tinker-{sdk}", [f"tinker=={sdk}", "pytest", "hypothesis"], log)
    import sysconfig

    site = next((base / f"tinker-{sdk}" / "lib").glob("python*/site-packages"))
    (site / "zz_localsession_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def wait_for(url: str, seconds: float, proc: subprocess.Popen[bytes]) -> None:
    """Poll ``url`` until it answers 200 (or the server exits, or ``seconds`` pass)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    raise RuntimeError(f"{url} did not answer within {seconds:.0f} s")


@contextmanager
def running(
    args: Sequence[str], log: Path, env: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """A server process for the block; its whole process group is stopped after."""
    with log.open("a") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


#: Seconds one ``result()`` may wait on a peer (the suite's ``--op-timeout``): the SDK
#: retries a 5xx from ``retrieve_future`` until then, and skyrl-tx answers 500 forever to a
#: result holding a NaN (docs/peers.md), which at the suite's 900 s default held each test
#: for 15 minutes.
OP_TIMEOUT_S = 60
#: Seconds a whole test (setup and call) may take before it is stopped and reported failed
#: (``conformance/peers/deadline.py``): a test waits on several results at most.
TEST_TIMEOUT_S = 150
#: Runs of pytest one report may take: after a hang the deadline could not stop, the suite
#: starts again without the tests that have a verdict (deadline.HUNG_EXIT).
ATTEMPTS = 8


def run_suite(
    python: Path,
    url: str,
    report: Path,
    log: Path,
    run: dict[str, Any],
    server: subprocess.Popen[bytes],
    model: str = MODEL,
    restart: Callable[[], subprocess.Popen[bytes]] | None = None,
) -> int:
    """The Tinker suite against ``url`` from ``python``, every test to a verdict: a test
    that hangs is stopped at :data:`TEST_TIMEOUT_S` and the run goes on; after a hang that
    could not be stopped the suite runs again without the tests already reported, and so
    after ``server`` exits, once ``restart`` has started it again (without ``restart``, the
    tests after the exit are not run and the report says so). Writes
    ``report`` (one conformance report, ``run`` added as its ``"run"`` entry: the peer, the
    SDK, the time taken, the box's load); returns pytest's last status."""
    from conformance.peers import deadline

    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TINKER_API_KEY": KEY}
    base = [str(python), "-m", "pytest", "-p", "conformance.plugin", "-p", "no:cacheprovider",
            "-p", "conformance.peers.deadline", f"--test-timeout={TEST_TIMEOUT_S}",
            "--backend=tinker", f"--base-url={url}", f"--base-model={model}", "-q", "-rfE",
            f"--op-timeout={OP_TIMEOUT_S}"]  # fmt: skip
    merged: dict[str, Any] | None = None
    exits: list[int] = []
    started = time.time()
    status = 0
    report.unlink(missing_ok=True)
    with LoadSampler() as load:
        for attempt in range(1, ATTEMPTS + 1):
            part = report.with_name(f"{report.stem}.part{attempt}.json")
            part.unlink(missing_ok=True)
            skip = [f"--deselect={t['id']}" for t in (merged or {}).get("tests", [])]
            args = [*base, f"--conformance-report={part}", *skip, str(SUITE)]
            with log.open("a") as out:
                out.write(f"$ {' '.join(args[:14])} ... ({len(skip)} deselected)\n")
                out.flush()
                suite = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         env=env)  # fmt: skip
                status = watch(suite, server)
            if part.exists():
                merged = merge(merged, json.loads(part.read_text()))
                part.unlink()
            if server.poll() is not None:
                exits.append(server.returncode)
                if restart is None:
                    break
                server = restart()
            elif status != deadline.HUNG_EXIT:
                break
    if merged is None:
        return status
    merged["duration_s"] = round(time.time() - started, 1)
    if exits:  # said in the report
        then = "restarted, the suite resumed" if restart else "the suite was stopped there"
        run = {**run, "server_exits": len(exits),
               "server_exit": f"the server exited {len(exits)} time(s) during the run "
               f"(status {', '.join(map(str, exits))}): {then}"}  # fmt: skip
    merged["run"] = {**run, "attempts": attempt, "load_1min": load.summary(),
                     "cpus": os.cpu_count(), "op_timeout_s": OP_TIMEOUT_S,
                     "test_timeout_s": TEST_TIMEOUT_S}  # fmt: skip
    report.write_text(json.dumps(merged, indent=2))
    return status


#: Loaded in TuFT's venv by a .pth file: with no GPU, the CUDA memory statistics its HF
#: trainer reads around each micro-batch answer nothing instead of raising (docs/peers.md).
#: It patches ``torch.cuda`` when something imports it, not at start-up: every Python
#: process of the venv (Ray's agents and workers too) reads the .pth, and importing torch
#: in each of them made Ray's agents miss their 15 s start-up window on a busy box.
CPU_SHIM = """import importlib.util
import sys


def _patch(cuda):
    if not cuda.is_available():
        cuda.reset_peak_memory_stats = lambda *args, **kwargs: None
        for name in ("max_memory_allocated", "memory_allocated", "memory_reserved"):
            setattr(cuda, name, lambda *args, **kwargs: 0)


class _PatchCudaOnImport:
    def find_spec(self, name, path=None, target=None):
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _patch(module)

            spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchCudaOnImport())
"""


def tiny_model(base: Path) -> Path:
    """``localsession/tiny`` as a Hugging Face directory (weights and tokenizer)."""
    model = base / "models" / "tiny"
    if not (model / "config.json").exists():
        from localsession import wiring

        wiring.save_builtin_model(MODEL, model)
        config = model / "tokenizer_config.json"  # older transformers (skyrl-tx's) lack the
        settings = json.loads(config.read_text())  # class this transformers names it by
        settings["tokenizer_class"] = "PreTrainedTokenizerFast"
        config.write_text(json.dumps(settings, indent=1))
        shape = model / "config.json"  # skyrl-tx's Llama reads rope_theta at the top level
        values = json.loads(shape.read_text())
        values.setdefault("rope_theta", (values.get("rope_parameters") or {}).get("rope_theta"))
        shape.write_text(json.dumps(values, indent=1))
    return model


def tuft(base: Path, port: int) -> list[Path]:
    """TuFT on ``localsession/tiny`` (training only), checked with tinker 0.38 and 0.28.1."""
    log = base / "tuft.log"
    python = venv(base / "tuft", ["tuft"], log)
    site = next((base / "tuft" / "lib").glob("python*/site-packages"))
    (site / "localsession_cpu_shim.py").write_text(CPU_SHIM)
    (site / "zz_localsession_cpu_shim.pth").write_text("import localsession_cpu_shim\n")
    model = tiny_model(base)
    config = base / "tuft.yaml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "supported_models": [{"model_name": MODEL, "model_path": str(model),
                              "max_model_len": 512, "capabilities": ["training"]}],
        "checkpoint_dir": str(base / "tuft-checkpoints"),
        "authorized_users": {KEY: "conformance"},
    }))  # fmt: skip
    bin_dir = python.parent
    # No CUDA_VISIBLE_DEVICES: Ray refuses one logical GPU when it names no device.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_ADDRESS": "auto"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    reports = []
    try:
        # Bounded memory on a shared box: two CPUs, a 300 MB object store (Ray's default is
        # 30% of the RAM), no dashboard.
        start_ray(bin_dir / "ray", base / "tuft", log, env)
        url = f"http://127.0.0.1:{port}"
        launch = [str(bin_dir / "tuft"), "launch", "--port", str(port), "--config", str(config)]
        with running(launch, log, env) as server:
            wait_for(f"{url}/api/v1/get_server_capabilities", 900, server)
            for sdk, client in ((version(Path(sys.executable), "tinker"), Path(sys.executable)),
                                (OLD_SDK, client_venv(base, OLD_SDK, log))):  # fmt: skip
                report = base / f"tuft-{sdk}.json"
                run = {"peer": "TuFT", "peer_version": version(python, "tuft"),
                       "sdk": f"tinker {sdk}", "model": MODEL,
                       "setup": "Ray with one logical GPU, training only, CPU shim"}  # fmt: skip
                run_suite(client, url, report, log, run, server)
                reports.append(report)
    finally:
        subprocess.run([str(bin_dir / "ray"), "stop", "--force"], env=env, check=False)
    return reports


def skyrl_tx(base: Path, port: int) -> list[Path]:
    """skyrl-tx 0.3.0 with its tinker extra: its API server, when the install has one,
    checked with tinker :data:`SKYRL_SDK`."""
    log = base / "skyrl-tx.log"
    python = venv(
        base / "skyrl-tx", ["skyrl-tx[tinker]==0.3.0", "jax>=0.8,<1", "flax>=0.12.2"], log
    )
    probe = subprocess.run([str(python), "-c", "import jax, tx.tinker.api"], capture_output=True,
                           text=True, check=False)  # fmt: skip
    if probe.returncode != 0:
        (base / "skyrl-tx.unavailable").write_text(probe.stderr[-4000:])
        print(f"skyrl-tx: no API server importable here (see {base / 'skyrl-tx.unavailable'})")
        return []
    # tx/tinker/api.py starts its engine as `uv run --extra tinker --extra jax -m
    # tx.tinker.engine ...`, which needs uv and a source checkout: run that module with the
    # venv's python instead.
    shim = base / "skyrl-tx-bin" / "uv"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f'#!/bin/sh\nshift\nwhile [ "$1" = "--extra" ]; do shift 2; done\n'
                    f'exec {python} "$@"\n')  # fmt: skip
    shim.chmod(0o755)
    url = f"http://127.0.0.1:{port}"
    model = str(tiny_model(base))
    launch = [str(python), "-m", "tx.tinker.api", "--base-model", model, "--port", str(port)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "JAX_PLATFORMS": "cpu",
           "PATH": f"{shim.parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    client = client_venv(base, SKYRL_SDK, log)
    report = base / f"skyrl-tx-{SKYRL_SDK}.json"
    run = {"peer": "skyrl-tx", "peer_version": version(python, "skyrl-tx"),
           "sdk": f"tinker {SKYRL_SDK}", "model": f"{MODEL} (its directory)",
           "setup": "CPU JAX, uv shim"}  # fmt: skip
    # Its state (sessions, models, futures) is a SQLite file beside its code: each run
    # starts from an empty one, not from the last run's.
    for stale in (python.parents[1] / "lib").glob("python*/site-packages/tx/tinker/tinker.db*"):
        stale.unlink()
    with ExitStack() as servers:  # its engine can crash (docs/peers.md): restarted, resumed

        def start() -> subprocess.Popen[bytes]:
            server = servers.enter_context(running(launch, log, env))
            wait_for(f"{url}/api/v1/get_server_capabilities", 900, server)
            return server

        run_suite(client, url, report, log, run, start(), model=model, restart=start)
    return [report]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = os.environ.get("LOCALSESSION_PEERS") or str(
        Path.home() / ".cache" / "localsession-peers"
    )
    parser.add_argument("--dir", type=Path, default=Path(default))
    parser.add_argument("--peer", choices=("tuft", "skyrl-tx"), action="append")
    parser.add_argument("--port", type=int, default=18472)
    parser.add_argument("--record", action=argparse.BooleanOptionalAction, default=True,
                        help="copy the reports into conformance/peers/reports/ and regenerate "
                        "docs/peers.md from them (report_peers.py --write)")  # fmt: skip
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    reports: list[Path] = []
    for peer in args.peer or ["tuft", "skyrl-tx"]:
        try:
            reports += (tuft if peer == "tuft" else skyrl_tx)(args.dir, args.port)
        except (subprocess.CalledProcessError, RuntimeError) as exc:
            print(f"{peer}: {exc} (log in {args.dir})")
    done = [r for r in reports if r.exists()]
    if done and args.record:
        from conformance.peers import report_peers

        report_peers.main(["--write", *(f"--from={r}" for r in done)])
    if done:
        print(f"reports: {', '.join(map(str, done))}")
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
