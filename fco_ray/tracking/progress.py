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


class RateMeter:
    """Rounds per second of one run, from the (time, round) of the rows it reported.

    The first interval (from the first row to the second) is left out: it holds the
    start-up, not the rounds (numba's compilation on first use, the data's set-up, Ray
    actors starting), and counting it made the quick start's ETA at round 10 read 4 min
    where 20 s were left. The rate then follows the last `window` seconds (at least the
    last interval), so a run that speeds up or slows down is estimated at its present pace.
    A row at an earlier round than the last (a rerun from round 0) starts over."""

    def __init__(self, window: float = 30.0):
        self.window = window
        self.points: list[tuple[float, int]] = []  # after the first interval's start
        self.first: tuple[float, int] | None = None

    def add(self, now: float, rnd: int) -> None:
        last = self.points[-1] if self.points else self.first
        if last is not None and rnd < last[1]:
            self.first, self.points = None, []
        if self.first is None:
            self.first = (now, rnd)
            return
        self.points.append((now, rnd))
        while len(self.points) > 2 and now - self.points[1][0] >= self.window:
            self.points.pop(0)  # keep the window (and at least one interval)

    def rate(self) -> float:
        if len(self.points) < 2:
            return math.nan
        (t0, r0), (t1, r1) = self.points[0], self.points[-1]
        return (r1 - r0) / (t1 - t0) if t1 > t0 and r1 > r0 else math.nan


def progress_text(label: str, rnd: int, rounds: int, rate: float, metrics: dict) -> str:
    """`label: round 120/2000 (6%), 150 rounds/s, ETA 13 s, f1=0.52` (rate NaN: `- rounds/s,
    ETA ?`, before a round after the start-up has been timed)."""
    eta = 0.0 if rnd >= rounds else (rounds - rnd) / rate if rate > 0 else math.nan
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
        self.meter = RateMeter()
        self.shown = -math.inf
        self.live = getattr(self.stream, "isatty", lambda: False)()
        self.pending = False

    def __call__(self, row: dict) -> None:
        now = self.clock()
        rnd = int(row["round"])
        self.meter.add(now, rnd)
        last = rnd >= self.rounds
        if now - self.shown < self.every and not last:
            return
        self.shown = now
        text = progress_text(self.label, rnd, self.rounds, self.meter.rate(),
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
