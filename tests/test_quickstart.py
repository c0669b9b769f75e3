"""The quick start shows the FCO paper's headline result: its own grid, rounds and problem
(sweeps/quickstart.yaml, run here through `fco_ray.run` without Ray), FedDualAvg recovers the
support while FedMiD's best stays lower and denser."""
import itertools
from pathlib import Path

import fco_ray
from fco_ray.runtime.files import load_yaml

QUICKSTART = Path(__file__).parent.parent / "sweeps" / "quickstart.yaml"


def best_final_row(sweep, algorithm):
    grid = sweep["search"]["grid"]
    best = None
    for cl, sl in itertools.product(grid["algorithm.client_lr"], grid["algorithm.server_lr"]):
        df = fco_ray.run({"problem": sweep["problem"], "rounds": sweep["rounds"],
                          "eval_every": sweep["eval_every"], "seed": sweep["seeds"][0],
                          "algorithm": {**sweep["algorithm"], "name": algorithm,
                                        "client_lr": cl, "server_lr": sl}})
        assert df.attrs["status"] == "finished", (algorithm, cl, sl)  # all four rate pairs stable
        row = df.iloc[-1]
        if best is None or row["f1"] > best["f1"]:
            best = row
    return best


def test_quickstart_shows_feddualavg_recovering_the_support_and_fedmid_denser():
    sweep = load_yaml(QUICKSTART)
    assert sweep["algorithms"] == ["feddualavg", "fedmid"] and sweep["tune"]["metric"] == "f1"
    dual = best_final_row(sweep, "feddualavg")
    mid = best_final_row(sweep, "fedmid")
    assert dual["f1"] >= 0.98 and abs(dual["density"] - 0.5) < 0.01  # support 512 of 1024
    assert mid["f1"] < dual["f1"] - 0.15
    assert mid["density"] > dual["density"] + 0.1
