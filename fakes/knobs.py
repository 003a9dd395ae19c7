"""Engine-level faults the runtime cannot inject, shared by a fake's engines (no torch)."""

from __future__ import annotations

import threading


class EngineKnobs:
    """Counters the engines consume: ``truncate_logprobs`` makes that many
    ``compute_logprobs`` results come back one value short."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.truncate_logprobs = 0

    def add_truncation(self, count: int) -> None:
        with self._mutex:
            self.truncate_logprobs += count

    def take_truncation(self) -> bool:
        with self._mutex:
            if self.truncate_logprobs <= 0:
                return False
            self.truncate_logprobs -= 1
            return True
