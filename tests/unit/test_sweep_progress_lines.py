"""A sweep's progress lines (fco_ray/sweep/logging.py): every PROGRESS_SECONDS one line per
running trial, and a trial whose line would read as its last one (it has not moved: waiting
for a CPU, compiling) is not printed again."""
from types import SimpleNamespace

from fco_ray.sweep import logging as sweep_logging
from fco_ray.tracking.progress import RateMeter


def test_a_trial_that_has_not_moved_is_not_shown_twice(monkeypatch):
    clock = iter(range(0, 1000, 11))  # each call 11 s later: past PROGRESS_SECONDS every time
    monkeypatch.setattr(sweep_logging.time, "monotonic", lambda: float(next(clock)))
    printed = []
    log = sweep_logging.MLflowLogger.__new__(sweep_logging.MLflowLogger)
    log.sweep, log.echo, log.shown = SimpleNamespace(metric="f1"), printed.append, -100.0
    log.running = {t: {"label": f"{t} seed0, 16 fused configurations", "rounds": 100,
                       "meter": RateMeter(), "row": None} for t in ("fedmid", "feddualavg")}
    log._progress("fedmid", {"round": 0, "best f1": 0.0})
    assert printed == ["  fedmid seed0, 16 fused configurations: round 0/100 (0%), - rounds/s, ETA ?, best f1=0"]
    log._progress("feddualavg", {"round": 10, "best f1": 0.9})  # fedmid still at round 0
    assert printed[1:] == ["  feddualavg seed0, 16 fused configurations: round 10/100 (10%), - rounds/s, "
                           "ETA ?, best f1=0.9"]
    log._progress("feddualavg", {"round": 20, "best f1": 0.95})
    assert [line.split(":")[0] for line in printed[2:]] == ["  feddualavg seed0, 16 fused configurations"]
