"""The report's best-configurations table ranks through `rank_configurations`, the ranking
of the verdict, `fco-ray runs --best` and the MLflow link: a sweep whose parent run carries
an older answer (`fco.best.<algorithm>` tags written before the tie-break on the area under
the curve) still gets the verdict's winner, and the table lists the best algorithm first."""
import json
from types import SimpleNamespace

import pandas as pd

from fco_ray.report import _best_table
from fco_ray.report.data import SweepData
from fco_ray.tracking.queries import best_per_algorithm


def tied() -> pd.DataFrame:
    """F1 = 1 at three feddualavg configurations (the area under the F1 curve decides: 0.01 / 3
    got there first); fedmid's best is F1 0.9; zeta_alg's F1 0.95 sorts last by name."""
    rows = [("feddualavg", 0.001, 0.3, 1.0, 0.80), ("feddualavg", 0.01, 3.0, 1.0, 0.95),
            ("feddualavg", 0.01, 1.0, 1.0, 0.90), ("fedmid", 0.01, 1.0, 0.9, 0.70),
            ("zeta_alg", 0.01, 1.0, 0.95, 0.5)]
    t = pd.DataFrame([{"algorithm": a, "algorithm.name": a, "algorithm.client_lr": c,
                       "algorithm.server_lr": s, "seed": seed, "status": "finished", "f1": f,
                       "mean.f1": m, "run_id": f"{a}-{c}-{s}-{seed}"}
                      for a, c, s, f, m in rows for seed in (0, 1)])
    t.attrs.update(params=["algorithm.client_lr", "algorithm.name", "algorithm.server_lr", "seed"],
                   metrics=["f1"])
    return t


def sweep(trials: pd.DataFrame, tags: dict) -> SweepData:
    parent = SimpleNamespace(info=SimpleNamespace(run_id="p" * 32),
                             data=SimpleNamespace(tags={"fco.metric": "f1", "fco.mode": "max", **tags}))
    return SweepData(client=None, parent=parent, experiment="toy", sweep={}, trials=trials)


def test_the_best_table_picks_the_verdicts_winner_over_an_older_tag():
    t = tied()
    older = {  # the ranking before the tie-break: F1, then the config as text (0.001 first)
        "fco.best.feddualavg": json.dumps({"algorithm.client_lr": 0.001, "algorithm.server_lr": 0.3}),
        "fco.best.feddualavg.run_ids": json.dumps(["feddualavg-0.001-0.3-0", "feddualavg-0.001-0.3-1"])}
    best = sweep(t, older).best_groups("f1", "max")
    verdict = best_per_algorithm(t, "f1", "max")
    winner = best["feddualavg"]
    assert winner["run_id"].tolist() == ["feddualavg-0.01-3.0-0", "feddualavg-0.01-3.0-1"]
    assert winner["run_id"].tolist() == verdict.iloc[0]["run_ids"]
    # the table's rows in the ranking's order (best first), not by name
    table = _best_table(best, ["algorithm.client_lr", "algorithm.server_lr"], ["f1"])
    assert table["algorithm"].tolist() == verdict["algorithm"].tolist() == ["feddualavg", "zeta_alg", "fedmid"]
    assert (table.iloc[0]["algorithm.client_lr"], table.iloc[0]["algorithm.server_lr"]) == (0.01, 3.0)


def test_an_algorithm_without_a_finished_configuration_has_no_row():
    t = tied()
    t.loc[t["algorithm"] == "fedmid", "status"] = "diverged"
    assert "fedmid" not in sweep(t, {}).best_groups("f1", "max")
