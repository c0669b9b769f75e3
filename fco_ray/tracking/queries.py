"""Reading a sweep back: its parent run, its children, a table of trials, the best
configuration per algorithm."""
from __future__ import annotations

import math

import pandas as pd

from .store import (
    ALGORITHM,
    FINAL_ROUND,
    PARENT,
    ROLE,
    STATUS,
    SWEEP,
    TRIAL_ID,
    Store,
    filter_tags,
    param_value,
)
from .summary import SUMMARY_PREFIXES


def find_parent(store: Store, experiment_id: str, sweep: str):
    """The latest parent run of sweep `sweep`, or None."""
    runs = store.client.search_runs([experiment_id], filter_tags(**{ROLE: "sweep", SWEEP: sweep}),
                                    order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0] if runs else None


def children(store: Store, parent) -> list:
    return store.search(parent.info.experiment_id, filter_tags(**{PARENT: parent.info.run_id}))


def trials_frame(runs: list) -> pd.DataFrame:
    """One row per child run: run_id, trial_id, algorithm, status (fco.status), run_status
    (MLflow's), final_round, the typed params (dotted keys, listed in `attrs["params"]`) and
    the final metric values (each metric's last step; listed in `attrs["metrics"]`; the
    summary metrics `final.*`, `best.*` are left out: they repeat the series; `mean.*`, the
    ranked metric's area under its curve, is a column but not in `attrs["metrics"]`)."""
    rows, params, metrics = [], set(), set()
    for r in runs:
        row = {"run_id": r.info.run_id, "trial_id": r.data.tags.get(TRIAL_ID),
               "algorithm": r.data.tags.get(ALGORITHM), "status": r.data.tags.get(STATUS),
               "run_status": r.info.status,
               "final_round": param_value(r.data.tags.get(FINAL_ROUND, "null"))}
        row.update({k: param_value(v) for k, v in r.data.params.items()})
        logged = {k: v for k, v in r.data.metrics.items() if not k.startswith(SUMMARY_PREFIXES)}
        row.update(logged)
        row.update({k: v for k, v in r.data.metrics.items() if k.startswith("mean.")})
        params.update(r.data.params)
        metrics.update(logged)
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs.update(params=sorted(params), metrics=sorted(metrics))
    return df


def best_per_algorithm(trials: pd.DataFrame, metric: str, mode: str) -> pd.DataFrame:
    """Best configuration per algorithm, seeds pooled.

    Trials are grouped by their config without `seed`; a group's score is the mean over its
    seeds of the final `metric`, where a trial that did not finish (diverged, stopped early,
    error) counts as the worst value (+inf for min, -inf for max), so such groups rank last
    and an algorithm whose every group has one gets no best. Groups tied on the score (e.g.
    F1 = 1 at many rates) are ranked by the mean over seeds of `mean.<metric>` (the area
    under the metric's curve: the group that got there sooner), then by their params' text.
    Returns one row per algorithm:
    `algorithm`, `score`, `seeds`, `run_ids`, the config (dotted keys) and the mean final
    value of every metric over the group.
    """
    if trials.empty or metric not in trials:
        return pd.DataFrame()
    worst = math.inf if mode == "min" else -math.inf
    params = [p for p in trials.attrs["params"] if p != "seed"]
    score = trials[metric].where((trials["status"] == "finished") & trials[metric].notna(), worst)
    config = trials[params].map(str).agg("|".join, axis=1)  # a trial's config minus its seed
    out = []
    for alg, rows in trials.groupby("algorithm").groups.items():
        group_score = score[rows].groupby(config[rows]).mean()
        top = group_score.min() if mode == "min" else group_score.max()
        if not math.isfinite(top):
            continue
        tied = group_score.index[group_score == top]
        chosen = tied[0]
        if len(tied) > 1 and f"mean.{metric}" in trials:  # the sooner, by the area under the curve
            speed = trials.loc[rows, f"mean.{metric}"].groupby(config[rows]).mean()[tied]
            if speed.notna().any():
                chosen = speed.idxmin() if mode == "min" else speed.idxmax()
        members = trials.loc[rows][config[rows] == chosen]
        out.append({"algorithm": alg, "score": float(group_score[chosen]),
                    "seeds": sorted(members["seed"].tolist()) if "seed" in members else [],
                    "run_ids": members["run_id"].tolist(),
                    **members.iloc[0][params].to_dict(),
                    **{m: float(members[m].mean()) for m in trials.attrs["metrics"]}})
    best = pd.DataFrame(out)
    best.attrs.update(params=params, metrics=trials.attrs["metrics"])
    return best
