"""Progress lines: one per stage, done/total jobs and an ETA from the work done so far."""

from __future__ import annotations

import sys
import threading
import time

# Without a terminal (a batch job's log), a stage's line is repeated on a finished job at most this often, so
# a log shows progress during a long stage without a line per job of a fast one.
LOG_INTERVAL_S = 30.0


class Progress:
    """One line per stage: done/total jobs and an ETA from the work done so far. Stages that run side by side
    (probe.pipeline.engine) write from their own threads: one line at a time."""

    def __init__(self, stream=None, enabled: bool = True, interval_s: float = LOG_INTERVAL_S):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s
        self._last_line = float("-inf")
        self._lock = threading.Lock()

    def line(self, index: int, count: int, name: str, done: int, total: int, eta: float | None, note: str = "",
             final: bool = False) -> None:
        if not self.enabled:
            return
        eta_s = "" if eta is None else f"  ETA {format_seconds(eta)}"
        text = f"[{index}/{count}] {name:<12} {done}/{total} jobs{eta_s}{('  ' + note) if note else ''}"
        with self._lock:
            now = time.monotonic()
            if self.tty:
                self.stream.write("\r\033[K" + text + ("\n" if final else ""))
            elif final or done == 0 or now - self._last_line >= self.interval_s:
                self.stream.write(text + "\n")
                self._last_line = now
            self.stream.flush()


def format_seconds(s: float) -> str:
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"
