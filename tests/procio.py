"""Reading a subprocess's output with a timeout, so a silent child fails a test instead of
hanging the suite.

``proc.stdout.readline()`` blocks for as long as the child prints nothing, which is forever
when the child buffers its stdout (a pipe is not a terminal). ``Lines`` drains a stream on a
daemon thread into a queue; every read waits at most its timeout and then fails, naming what
it was waiting for. Imported as ``procio`` (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import io
import queue
import threading
from typing import IO, AnyStr, Generic

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
