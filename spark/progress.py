"""Progress on stderr: one line per pipeline step, and while Spark works, the running stage's
finished/total tasks every few seconds (a daemon thread polling Spark's status tracker)."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

from pyspark import SparkContext


class Progress:
    def __init__(self, enabled: bool = True, out: TextIO | None = None, poll_s: float = 5.0) -> None:
        self.enabled = enabled
        self.out = out or sys.stderr
        self.poll_s = poll_s
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self, message: str) -> None:
        if self.enabled:
            print(f"pipeline [{time.monotonic() - self.started:7.1f}s] {message}", file=self.out, flush=True)

    def watch(self, sc: SparkContext) -> Progress:
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(
                target=self._poll, args=(sc,), name="pipeline-progress", daemon=True
            )
            self._thread.start()
        return self

    def _poll(self, sc: SparkContext) -> None:
        last = ""
        while not self._stop.wait(self.poll_s):
            try:
                tracker = sc.statusTracker()
                parts = []
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks")
            except Exception:
                return
            line = ", ".join(parts)
            if line and line != last:
                self.step(f"  ... {line}")
                last = line

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.poll_s + 1)
            self._thread = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
