"""The sweep's closing lines from fabricated trials: the verdict states what the data says
(winner, margin, truth, divergence, paper: tests/unit/test_verdict_papers.py), and an
edge-of-grid warning never points past a rate at which the sweep saw a run diverge
(fco_ray/report/grid.py)."""
from types import SimpleNamespace

import pandas as pd

from fco_ray.report.grid import edge_warnings
from fco_ray.report.verdict import (
    diverged_sentence,
    inside_grid,
    truth_sentence,
    verdict_lines,
)

KEYS = ["algorithm.client_lr", "algorithm.server_lr"]


def trials(rows) -> pd.DataFrame:
    """(algorithm, client_lr, server_lr, status, f1) -> a trials frame as tracking builds it."""
    return pd.DataFrame([{"algorithm": a, "algorithm.client_lr": c, "algorithm.server_lr": s,
                          "status": st, "f1": f, "seed": 0} for a, c, s, st, f in rows])


def data(frame, grid):
    return SimpleNamespace(trials=frame, sweep={"search": {"grid": grid}},
                           params=lambda: ["algorithm.name", *KEYS, "seed"])


def best_of(frame, alg):
    ok = frame[(frame["algorithm"] == alg) & (frame["status"] == "finished")]
    return ok.loc[[ok["f1"].idxmax()]]


def test_no_edge_warning_points_past_a_rate_that_diverged():
    # fedmid's best client rate 0.01 is the largest searched, and (0.01, 3) diverged: no
    # advice to go above 0.01. Its best server rate 1 is the smallest searched, nothing
    # diverged at 1: the warning to look below stays.
    frame = trials([("fedmid", 0.01, 1.0, "finished", 0.9), ("fedmid", 0.01, 3.0, "diverged", 0.0),
                    ("fedmid", 0.001, 1.0, "finished", 0.5), ("fedmid", 0.001, 3.0, "finished", 0.6)])
    grid = {"algorithm.client_lr": [0.001, 0.01], "algorithm.server_lr": [1.0, 3.0]}
    warnings = edge_warnings(data(frame, grid), {"fedmid": best_of(frame, "fedmid")})
    assert warnings == ["fedmid: the best server_lr = 1 is the smallest value searched (1 .. 3); the "
                        "optimum may lie below it: extend search.grid.algorithm.server_lr and sweep again"]
    # divergence at the edge that the inner value shares is not this axis's doing: a client
    # rate of 0.1 diverging at every server rate leaves the server_lr = 3 edge warning (and
    # the best client_lr 0.01 is the smallest: warned about too)
    shared = trials([("fedmid", 0.01, 3.0, "finished", 0.9), ("fedmid", 0.01, 1.0, "finished", 0.5),
                     ("fedmid", 0.1, 3.0, "diverged", 0.0), ("fedmid", 0.1, 1.0, "diverged", 0.0)])
    axes = {"algorithm.client_lr": [0.01, 0.1], "algorithm.server_lr": [1.0, 3.0]}
    assert [w.split(";")[0] for w in edge_warnings(data(shared, axes), {"fedmid": best_of(shared, "fedmid")})] == [
        "fedmid: the best client_lr = 0.01 is the smallest value searched (0.01 .. 0.1)",
        "fedmid: the best server_lr = 3 is the largest value searched (1 .. 3)"]
    # the same best without any divergence: both edges are warned about
    calm = frame.assign(status="finished")
    assert len(edge_warnings(data(calm, grid), {"fedmid": best_of(calm, "fedmid")})) == 2


def test_verdict_names_winner_margin_truth_divergence_and_paper():
    frame = trials([("feddualavg", 0.03, 1.0, "diverged", 0.0), ("feddualavg", 0.01, 1.0, "finished", 1.0),
                    ("feddualavg", 0.001, 1.0, "finished", 0.7),
                    ("fedmid", 0.03, 1.0, "diverged", 0.0), ("fedmid", 0.01, 1.0, "finished", 0.8),
                    ("fedmid", 0.001, 1.0, "finished", 0.6)])
    truth = {"problem.name": "lasso", "problem.support": 512, "problem.dim": 1024, "rounds": 100}
    best = pd.DataFrame([
        {"algorithm": "fedmid", "score": 0.8, "seeds": [0], **truth, "algorithm.client_lr": 0.01,
         "algorithm.server_lr": 1.0, "density": 0.75, "precision": 512 / 768, "recall": 1.0},
        {"algorithm": "feddualavg", "score": 1.0, "seeds": [0], **truth, "algorithm.client_lr": 0.01,
         "algorithm.server_lr": 1.0, "density": 0.5, "precision": 1.0, "recall": 1.0}])
    frame = frame.assign(**truth)  # the trials ran Fig. 3's problem for 100 rounds only
    lines = verdict_lines(best, frame, "f1", "max", KEYS, "sweeps/mine.yaml")
    assert lines[0] == ("verdict: feddualavg wins on final f1: 1.000 at client_lr=0.01, server_lr=1, against "
                        "fedmid's best 0.800 at client_lr=0.01, server_lr=1 (margin 0.200)")
    assert lines[1] == ("  feddualavg: density 0.500 = exactly the true support (512 of 1024 features), "
                        "precision 1.000: every true feature kept, no false one")
    assert lines[2].startswith("  fedmid: density 0.750 = 768 features kept for 512 true ones")
    assert lines[2].endswith("256 false features, denser than the truth")
    # one server rate only: not an axis; client_lr 0.01 is inside (0.03 diverged)
    assert lines[3] == ("  diverged (shown as diverged above): 2 of 6 runs, feddualavg and fedmid at "
                        "client_lr=0.03 (every server_lr): the grid reaches rates too large to be stable, "
                        "and every best rate lies inside the grid")
    # not Fig. 3's setting (100 rounds, and the frame lacks the rest): the figure is not claimed
    assert lines[4].startswith("  not the setting of Fig. 3 of Yuan, Zaheer, Reddi (ICML 2021)")
    assert "rounds 100 here, 2000 there" in lines[4] and lines[4].endswith("no paper claim is checked")
    assert lines[5].startswith("  next: fco-ray sweep sweeps/e1_lasso.yaml")
    # the paper-scale file itself does not send the user to itself
    assert not any("next:" in l for l in verdict_lines(best, frame, "f1", "max", KEYS, "sweeps/e1_lasso.yaml"))


def test_verdict_says_only_what_the_data_supports():
    frame = trials([("a", 0.1, 1.0, "finished", 0.3), ("a", 0.01, 1.0, "finished", 0.2)])
    best = pd.DataFrame([{"algorithm": "a", "score": 0.3, "seeds": [0], "problem.name": "mine",
                          "algorithm.client_lr": 0.1, "algorithm.server_lr": 1.0}])
    # no truth known, nothing diverged, no paper: one line, and the grid is not bracketed
    assert verdict_lines(best, frame, "f1", "max", KEYS) == ["verdict: a wins on final f1: 0.300 at "
                                                             "client_lr=0.1, server_lr=1"]
    assert not inside_grid(best, frame, KEYS) and diverged_sentence(frame, KEYS) is None
    assert truth_sentence(best.iloc[0], frame) is None
    assert verdict_lines(pd.DataFrame(), frame, "f1", "max", KEYS)[0].startswith("verdict: no configuration")
    low = {"problem.name": "lowrank", "problem.rank": 16}
    assert truth_sentence(pd.Series({**low, "rank": 16.0}), frame) == "rank 16 = exactly the true rank 16"
    assert truth_sentence(pd.Series({**low, "rank": 22.0}), frame) == "rank 22 against the true rank 16 (above it)"


def test_verdict_says_when_it_broke_a_tie_and_how():
    # three configurations end at F1 1; the ranking (rank_configurations) puts first the one
    # with the larger mean F1 over its rounds, and the verdict says so with the two values
    frame = trials([("a", 0.1, 1.0, "finished", 1.0), ("a", 0.01, 1.0, "finished", 1.0),
                    ("b", 0.1, 1.0, "finished", 1.0), ("b", 0.01, 1.0, "finished", 0.5)])
    frame = frame.assign(**{"mean.f1": [0.80, 0.95, 0.70, 0.40], "run_id": list("wxyz")})
    frame.attrs.update(params=[*KEYS, "seed"], metrics=["f1"])
    from fco_ray.tracking.queries import best_per_algorithm

    best = best_per_algorithm(frame, "f1", "max")
    head = verdict_lines(best, frame, "f1", "max", KEYS)[0]
    assert head == ("verdict: a wins on final f1: 1.000 at client_lr=0.01, server_lr=1 (one of 3 "
                    "configurations at 1.000, 2 a, 1 b; the ranking breaks the tie by the larger mean f1 "
                    "over the evaluated rounds (the configuration that got there sooner): 0.950 here, "
                    "0.800 the next), against b's best 1.000 at client_lr=0.1, server_lr=1 (margin 0.000)")
    # no tie: no clause
    alone = frame.assign(f1=[0.9, 1.0, 0.8, 0.5])
    assert "one of" not in verdict_lines(best_per_algorithm(alone, "f1", "max"), alone, "f1", "max", KEYS)[0]
