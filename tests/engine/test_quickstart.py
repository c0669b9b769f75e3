"""The quick start shows the FCO paper's headline result: its own grid, rounds and problem
(sweeps/quickstart.yaml, run here through `fco_ray.run` without Ray), FedDualAvg recovers the
support while FedMiD's best stays lower and denser, and the grid brackets both optima: its
largest client rate diverges, and no best rate sits on an edge of the grid that did not
diverge (so the sweep's closing lines print no edge-of-grid warning)."""
from pathlib import Path

import pandas as pd

import fco_ray
from fco_ray.runtime.files import load_yaml
from fco_ray.report.verdict import inside_grid, verdict_lines

QUICKSTART = Path(__file__).parents[2] / "sweeps" / "quickstart.yaml"
KEYS = ["algorithm.client_lr", "algorithm.server_lr"]


def grid_rows(sweep, algorithm) -> list[dict]:
    """The final row of every grid point, as the sweep's trials frame has them (run fused, as
    the sweep runs them; each member equals its lone run: tests/engine/test_fused.py)."""
    df = fco_ray.run_grid({"problem": sweep["problem"], "rounds": sweep["rounds"],
                           "eval_every": sweep["eval_every"], "seed": sweep["seeds"][0],
                           "algorithm": {**sweep["algorithm"], "name": algorithm}}, sweep["search"]["grid"])
    rows = []
    for (cl, sl), runs in df.groupby(KEYS, sort=False):
        last = runs.sort_values("round").iloc[-1]
        rows.append({"algorithm": algorithm, "algorithm.client_lr": cl, "algorithm.server_lr": sl,
                     "seed": sweep["seeds"][0], "problem.name": "lasso", "problem.support": 512,
                     "problem.dim": 1024, "problem.lam": 0.1, "problem.clients": 64,
                     "problem.samples_per_client": 128, "rounds": sweep["rounds"],
                     **{f"algorithm.{k}": v for k, v in sweep["algorithm"].items()},
                     **last.drop(["round", *KEYS]).to_dict()})
    return rows


def test_quickstart_shows_feddualavg_recovering_the_support_and_fedmid_denser():
    sweep = load_yaml(QUICKSTART)
    assert sweep["algorithms"] == ["feddualavg", "fedmid"] and sweep["tune"]["metric"] == "f1"
    trials = pd.DataFrame(grid_rows(sweep, "feddualavg") + grid_rows(sweep, "fedmid"))
    largest = max(sweep["search"]["grid"]["algorithm.client_lr"])
    # the largest client rate diverges for both algorithms, at every server rate
    assert (trials.loc[trials["algorithm.client_lr"] == largest, "status"] == "diverged").all()
    finished = trials[trials["status"] == "finished"]
    best = finished.loc[finished.groupby("algorithm")["f1"].idxmax()].set_index("algorithm")
    dual, mid = best.loc["feddualavg"], best.loc["fedmid"]
    assert dual["f1"] >= 0.98 and abs(dual["density"] - 0.5) < 0.01  # support 512 of 1024
    assert mid["f1"] < dual["f1"] - 0.1
    assert mid["density"] > dual["density"] + 0.1
    # every best configuration is bracketed: no edge-of-grid warning would be printed
    frame = best.reset_index().assign(score=lambda d: d["f1"], seeds=[[0], [0]])
    assert inside_grid(frame, trials, KEYS)
    lines = verdict_lines(frame, trials, "f1", "max", KEYS, str(QUICKSTART))
    assert lines[0].startswith("verdict: feddualavg wins on final f1: 1.000")
    assert "exactly the true support (512 of 1024 features)" in lines[1]
    assert "denser than the truth" in lines[2] and lines[3].endswith("every best rate lies inside the grid")
    # Fig. 3's setting but for its length: the figure is not claimed, its sweep is named
    assert lines[4] == ("  not the setting of Fig. 3 of Yuan, Zaheer, Reddi (ICML 2021), federated LASSO "
                        "(rounds 100 here, 2000 there): no paper claim is checked")
    assert lines[5].startswith("  next: fco-ray sweep sweeps/e1_lasso.yaml")
