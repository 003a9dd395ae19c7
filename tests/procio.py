"""Children of the tests: reading their output with a timeout, so a silent child fails a
test instead of hanging the suite, and stopping them, process group and all, so none is
left behind when a test fails or times out.

``proc.stdout.readline()`` blocks for as long as the child prints nothing, which is forever
when the child buffers its stdout (a pipe is not a terminal). ``Lines`` drains a stream on a
daemon thread into a queue; every read waits at most its timeout and then fails, naming what
it was waiting for.

:func:`spawn` starts a child as the leader of its own process group and, on leaving the
``with`` block however it is left, stops the group (SIGTERM, then SIGKILL after a grace
period; conformance/backends/processes.py): a server the child started goes too.
:func:`tagged` finds the processes that carry a marker in their environment, which every
descendant inherits, so a test can prove none outlived it. Imported as ``procio`` (pytest
puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import io
import os
import queue
import subprocess
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, AnyStr, Generic

from conformance.backends import processes

#: How long one line may take by default: a server's start-up on a loaded 2-core machine.
LINE_TIMEOUT = 120.0


class Lines(Generic[AnyStr]):
    """The lines of ``stream`` (a child's stdout or stderr), each read with a timeout."""

    def __init__(self, stream: IO[AnyStr] | None, what: str = "the child's output") -> None:
        if stream is None:
            raise ValueError("Lines needs a pipe: start the child with stdout=subprocess.PIPE")
        self.what = what
        self._nothing: AnyStr = "" if isinstance(stream, io.TextIOBase) else b""  # type: ignore[assignment]
        self._queue: queue.Queue[AnyStr | None] = queue.Queue()
        self._ended = False
        self._reader = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._reader.start()

    def _drain(self, stream: IO[AnyStr]) -> None:
        while line := stream.readline():
            self._queue.put(line)
        self._queue.put(None)

    def readline(self, timeout: float = LINE_TIMEOUT) -> AnyStr:
        """The next line; an empty one once the stream ended. Fails after ``timeout`` s."""
        if self._ended:
            return self._nothing
        try:
            line = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line of {self.what} within {timeout:g} s") from None
        if line is None:
            self._ended = True
            return self._nothing
        return line

    def rest(self, timeout: float = LINE_TIMEOUT) -> AnyStr:
        """Everything left, up to the end of the stream (the child must be exiting)."""
        parts: list[AnyStr] = []
        while True:
            line = self.readline(timeout)
            if not line:
                return self._nothing.join(parts)
            parts.append(line)


#: The environment variable :func:`spawn` marks its children (and so their descendants) with.
TAG_VARIABLE = "LOCALSESSION_TEST_PROCESS_TAG"


@contextmanager
def spawn(args: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """A child in a process group of its own, stopped with its group on exit. Its
    environment (``env=``, default this one) gets :data:`TAG_VARIABLE` (:func:`tag_of`)."""
    tag = uuid.uuid4().hex
    popen["env"] = {**(popen.get("env") or os.environ), TAG_VARIABLE: tag}
    proc = processes.start(args, own_group=True, **popen)
    proc.tag = tag  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        processes.stop(proc)


def tag_of(proc: subprocess.Popen[Any]) -> str:
    """The tag :func:`spawn` gave ``proc`` (and so every process it starts)."""
    return str(proc.tag)  # type: ignore[attr-defined]


def tagged(tag: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose environment carries ``tag`` under
    :data:`TAG_VARIABLE` (Linux: read from /proc; elsewhere an empty list)."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
            if needle not in environ.split(b"\0"):
                continue
            status = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if status == "Z":  # exited, not yet reaped by its parent: not running
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue  # gone meanwhile, or another user's
        found.append((int(entry.name), command.strip()))
    return found
