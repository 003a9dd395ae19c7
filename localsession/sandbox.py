"""Run untrusted, model-written Python in a constrained subprocess and report what happened.

This is the grader for code RL (``examples/code_rl.py``): each call writes the program to a
fresh temporary directory, runs it with a separate interpreter, and deletes the directory.

Layers, each applied where the OS allows (``SandboxResult.isolation`` says which took effect):

- **time:** a wall-clock limit, after which the whole process group is killed (SIGKILL);
- **CPU, memory, files:** ``resource`` limits in the child: ``RLIMIT_CPU`` (SIGXCPU, then
  SIGKILL a second later), ``RLIMIT_AS`` (allocation fails with MemoryError),
  ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, and ``RLIMIT_NPROC = 0`` (no new processes or
  threads; not enforced for root, which the audit hook below covers);
- **network:** a new, empty network namespace (``unshare``), so not even loopback reaches the
  host; plus the audit hook refusing socket creation and name lookups;
- **files and processes:** a ``sys.addaudithook`` hook, installed before the program runs,
  refuses opening or listing paths outside the sandbox directory (reading the standard
  library excepted), links, ``chdir``, process creation (fork, exec, spawn, subprocess),
  signalling, raising limits, ``ctypes`` and heap introspection (``gc.get_objects``);
- **environment:** isolated mode (``python -I -S``: no site-packages, no ``PYTHON*`` variables),
  a minimal environment (no inherited secrets), stdin from /dev/null, captured output capped.

An audit hook is not a security boundary against a determined attacker inside CPython; the OS
layers are. For hostile code, run inside a container or VM as well. This sandbox is meant for
grading model-written code, which is mostly wrong rather than malicious.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: The child's bootstrap: limits, namespace, audit hook, then the program. argv: box, limits.
_BOOTSTRAP = r"""
import sys, json, resource
box, limits = sys.argv[1], json.loads(sys.argv[2])
iso = {}
def _lim(name, value, hard=None):
    try:
        resource.setrlimit(getattr(resource, name), (value, value if hard is None else hard))
        return True
    except (ValueError, OSError):
        return False
iso["cpu"] = _lim("RLIMIT_CPU", limits["cpu_seconds"], limits["cpu_seconds"] + 1)
iso["memory"] = _lim("RLIMIT_AS", limits["memory_bytes"])
iso["file_size"] = _lim("RLIMIT_FSIZE", limits["file_bytes"])
iso["open_files"] = _lim("RLIMIT_NOFILE", 64)
iso["processes"] = _lim("RLIMIT_NPROC", 0)
iso["network_namespace"] = False
if limits["unshare_network"]:
    try:
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
        flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
        iso["network_namespace"] = libc.unshare(flags) == 0
    except Exception:
        pass
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]
import sysconfig
_ROOTS = tuple(sorted({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}))
_BOX = box.rstrip("/") + "/"
_BLOCKED = frozenset({
    "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg",
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "subprocess.Popen", "os.kill", "os.killpg", "os.setuid", "os.setsid", "pty.spawn",
    "resource.setrlimit", "resource.prlimit", "ctypes.dlopen", "ctypes.dlsym",
    "ctypes.cdata", "ctypes.call_function", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "sys._current_frames", "os.symlink", "os.link", "os.chdir",
    "os.fchdir", "os.chroot", "os.mknod", "os.mkfifo", "mmap.__new__", "sys.setprofile",
    "sys.settrace", "webbrowser.open", "urllib.Request", "ftplib.connect", "smtplib.connect",
})
_BLOCKED_IMPORTS = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "_socket", "socket",
                              "multiprocessing", "_multiprocessing", "resource", "pty"})
_PATH_EVENTS = frozenset({"open", "os.listdir", "os.scandir", "os.remove", "os.rmdir",
                          "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                          "os.utime", "shutil.rmtree", "shutil.copyfile", "os.walk",
                          "glob.glob", "os.unlink"})
def _inside(path, write):
    if type(path) is int:
        return True
    if type(path) is bytes:
        path = path.decode("utf-8", "replace")
    if type(path) is not str:
        path = str(path)
    if "\x00" in path or "/../" in "/" + path + "/":
        return False
    if not path.startswith("/"):
        return True  # relative to the box: chdir is refused, so the cwd stays the box
    if (path + "/").startswith(_BOX):
        return True
    return not write and any((path + "/").startswith(r + "/") for r in _ROOTS)
def _hook(event, args):
    if event in _BLOCKED:
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "import" and args[0].split(".")[0] in _BLOCKED_IMPORTS:
        raise PermissionError(f"sandbox: import {args[0]} is not allowed")
    if event in _PATH_EVENTS and args:
        mode = args[1] if event == "open" and len(args) > 1 else None
        flags = args[2] if event == "open" and len(args) > 2 else 0
        write = event != "open" or (isinstance(mode, str) and any(c in mode for c in "wax+")) \
            or (isinstance(flags, int) and flags & 3 != 0)
        if event in ("os.listdir", "os.scandir", "os.walk", "glob.glob"):
            write = False
        target = args[0] if args[0] is not None else "."
        if not _inside(target, write):
            raise PermissionError(f"sandbox: {event} outside the sandbox: {target!r}")
sys.stdout.write("")
sys.stderr.write(json.dumps({"sandbox_isolation": iso}) + "\n")
sys.stderr.flush()
sys.addaudithook(_hook)
del _lim, resource, json, sysconfig
_code = open("main.py", encoding="utf-8").read()
_globals = {"__name__": "__main__", "__file__": _BOX + "main.py", "__builtins__": __builtins__}
del box, limits, iso
exec(compile(_code, "main.py", "exec"), _globals)
"""


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use."""

    wall_seconds: float = 5.0
    cpu_seconds: int = 5
    memory_bytes: int = 512 * 2**20
    file_bytes: int = 2**20
    output_bytes: int = 64 * 2**10
    unshare_network: bool = True


@dataclass
class SandboxResult:
    """How a run ended. ``ok`` means exit status 0 within every limit."""

    ok: bool
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    #: "SIGKILL", "SIGXCPU", ... when a signal ended the program.
    signal: str | None = None
    #: Which layers took effect in the child (see the module docstring).
    isolation: dict[str, bool] = field(default_factory=dict)
    #: The temporary directory it ran in (deleted before this result is returned).
    workdir: str = ""


def _clean_env(box: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": box, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}


def _read_capped(path: Path, cap: int) -> str:
    with path.open("rb") as handle:
        data = handle.read(cap + 1)
    text = data[:cap].decode("utf-8", "replace")
    return text + ("\n[output truncated]" if len(data) > cap else "")


def _remove_tree(path: str) -> None:
    """Delete ``path`` even if the program made parts of it read-only."""

    def retry(func: object, target: str, _exc: object) -> None:
        parent = os.path.dirname(target)
        for p in (parent, target):
            try:
                os.chmod(p, stat.S_IRWXU)
            except OSError:
                pass
        try:
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target, ignore_errors=True)
            else:
                os.unlink(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)
    if os.path.exists(path):
        shutil.rmtree(path, ignore_errors=True)


def run_python(program: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run ``program`` (Python source) in the sandbox; never raises for the program's sake."""
    limits = limits or SandboxLimits()
    box = tempfile.mkdtemp(prefix="localsession-sandbox-")
    logs = tempfile.mkdtemp(prefix="localsession-sandbox-out-")
    started = time.perf_counter()
    try:
        Path(box, "main.py").write_text(program, encoding="utf-8")
        child_limits = {
            "cpu_seconds": max(1, int(limits.cpu_seconds)),
            "memory_bytes": int(limits.memory_bytes),
            "file_bytes": int(limits.file_bytes),
            "unshare_network": limits.unshare_network,
        }
        out_path, err_path = Path(logs, "stdout"), Path(logs, "stderr")
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, box, json.dumps(child_limits)],
                cwd=box,
                env=_clean_env(box),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
            timed_out = False
            try:
                proc.wait(timeout=limits.wall_seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_group(proc.pid)
            proc.wait()
        returncode = proc.returncode
        stderr = _read_capped(err_path, limits.output_bytes)
        isolation: dict[str, bool] = {}
        first, _, rest = stderr.partition("\n")
        if first.startswith('{"sandbox_isolation"'):
            isolation = json.loads(first)["sandbox_isolation"]
            stderr = rest
        killed = returncode is not None and returncode < 0
        sig = signal.Signals(-returncode).name if killed else None
        return SandboxResult(
            ok=returncode == 0 and not timed_out,
            returncode=returncode,
            stdout=_read_capped(out_path, limits.output_bytes),
            stderr=stderr,
            timed_out=timed_out,
            seconds=time.perf_counter() - started,
            signal=sig,
            isolation=isolation,
            workdir=box,
        )
    finally:
        _remove_tree(box)
        _remove_tree(logs)


def _kill_group(pgid: int) -> None:
    """SIGKILL everything left in the program's process group (it leads its own session)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
