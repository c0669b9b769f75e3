"""The progress line's ETA leaves out the start-up and follows the recent pace (the quick
start said `ETA 4 min 08 s` at round 10 of a run that ended 20 s later: the first interval
held numba's compilation)."""
import io

from fco_ray.tracking.progress import Progress, RateMeter


def lines_of(times_rounds, rounds=100):
    now = [0.0]
    stream = io.StringIO()
    progress = Progress(rounds, ["f1"], label="fedmid 0.01/1 s0", every=0.0, stream=stream,
                        clock=lambda: now[0])
    for t, rnd in times_rounds:
        now[0] = t
        progress({"round": rnd, "f1": 0.5})
    return stream.getvalue().splitlines()


def test_the_compilation_interval_does_not_count():
    # round 0 at 0 s, round 10 after 15 s of compilation, then 10 rounds per 0.25 s
    rows = [(0.0, 0), (15.0, 10)] + [(15.0 + 0.25 * k, 10 + 10 * k) for k in range(1, 10)]
    lines = lines_of(rows)
    assert lines[1] == "fedmid 0.01/1 s0: round 10/100 (10%), - rounds/s, ETA ?, f1=0.5"  # not 2 min 15 s
    assert lines[2] == "fedmid 0.01/1 s0: round 20/100 (20%), 40 rounds/s, ETA 2 s, f1=0.5"
    assert lines[-1] == "fedmid 0.01/1 s0: round 100/100 (100%), 40 rounds/s, ETA 0 s, f1=0.5"


def test_the_rate_follows_the_recent_rounds():
    meter = RateMeter(window=10.0)
    for t, rnd in [(0, 0), (5, 10), (6, 20), (7, 30)]:  # 10 rounds/s after the start-up
        meter.add(t, rnd)
    assert meter.rate() == 10.0
    for t in range(8, 40):  # then it slows to 1 round per second
        meter.add(t, 30 + (t - 7))
    assert abs(meter.rate() - 1.0) < 1e-9
    meter.add(40, 0)  # a rerun from round 0: timed afresh
    assert meter.rate() != meter.rate()  # nan
