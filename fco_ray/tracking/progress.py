"""Progress of a run in the terminal: round, rounds per second, ETA and the current metric.

`Progress` gets every evaluated row of one run and prints at most one line per `every`
seconds (and the last one), so a fast run does not flood the terminal and a slow one still
shows life. On a terminal the line is rewritten in place; in a log file each is a line.
"""
from __future__ import annotations

import math
import sys
import time
from typing import Callable, TextIO


def duration(seconds: float) -> str:
    """12 s, 3 min 05 s, 2 h 07 min."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _value(v) -> str:
    return f"{v:.4g}" if isinstance(v, (int, float)) else str(v)


def progress_text(label: str, rnd: int, rounds: int, elapsed: float, start_round: int,
                  metrics: dict) -> str:
    """`label: round 120/2000 (6%), 150 rounds/s, ETA 13 s, f1=0.52`."""
    rate = (rnd - start_round) / elapsed if elapsed > 0 and rnd > start_round else math.nan
    eta = (rounds - rnd) / rate if rate > 0 else math.nan
    parts = [f"round {rnd}/{rounds} ({100 * rnd / rounds:.0f}%)",
             f"{rate:.3g} rounds/s" if math.isfinite(rate) else "- rounds/s", f"ETA {duration(eta)}"]
    parts += [f"{k}={_value(v)}" for k, v in metrics.items()]
    return f"{label}: " + ", ".join(parts) if label else ", ".join(parts)


class Progress:
    """Progress lines of one run of `rounds` rounds; `metrics`: the metric names shown."""

    def __init__(self, rounds: int, metrics: list[str], label: str = "", every: float = 2.0,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.rounds, self.metrics, self.label, self.every = rounds, metrics, label, every
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.start_round: int | None = None
        self.shown = -math.inf
        self.live = getattr(self.stream, "isatty", lambda: False)()
        self.pending = False

    def __call__(self, row: dict) -> None:
        now = self.clock()
        rnd = int(row["round"])
        if self.start_round is None:  # rate counted from the first row (round 0: after set-up)
            self.start, self.start_round = now, rnd
        last = rnd >= self.rounds
        if now - self.shown < self.every and not last:
            return
        self.shown = now
        text = progress_text(self.label, rnd, self.rounds, now - self.start, self.start_round,
                             {m: row[m] for m in self.metrics if m in row})
        if self.live:
            self.stream.write("\r\033[K" + text + ("\n" if last else ""))
            self.pending = not last
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End a line left open on a terminal (a diverged run stops before its last round)."""
        if self.pending:
            self.stream.write("\n")
            self.stream.flush()
            self.pending = False
