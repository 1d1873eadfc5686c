"""Progress lines: one per stage, done/total jobs and an ETA from the work done so far."""

from __future__ import annotations

import sys


class Progress:
    """One line per stage: done/total jobs and an ETA from the work done so far."""

    def __init__(self, stream=None, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self, index: int, count: int, name: str, done: int, total: int, eta: float | None, note: str = "",
             final: bool = False) -> None:
        if not self.enabled:
            return
        eta_s = "" if eta is None else f"  ETA {format_seconds(eta)}"
        text = f"[{index}/{count}] {name:<12} {done}/{total} jobs{eta_s}{('  ' + note) if note else ''}"
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        elif final or done == 0:
            self.stream.write(text + "\n")
        self.stream.flush()


def format_seconds(s: float) -> str:
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"
