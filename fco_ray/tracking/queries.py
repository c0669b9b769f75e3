"""Reading a sweep back: its parent run, its children, a table of trials, the best
configuration per algorithm."""
from __future__ import annotations

import math

import numpy as np
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
    the final metric values (each metric's last step, NaN for a diverged run; listed in
    `attrs["metrics"]`; the
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
    if len(df) and metrics:  # a diverged run has no final value: its last finite row (often
        # round 0, F1 0) is not where it ended; shown as diverged, as its progress line's nan
        df.loc[df["status"] == "diverged", sorted(metrics)] = math.nan
    df.attrs.update(params=sorted(params), metrics=sorted(metrics))
    return df


def rank_configurations(trials: pd.DataFrame, metric: str, mode: str) -> pd.DataFrame:
    """Every configuration of a sweep (a trial's config minus its seed), best first: THE
    ranking of fco-ray (the verdict, `best_per_algorithm`, `fco-ray runs --best`, the report's
    best table and the order of the MLflow link's run list all come from it).

    A configuration's score is the mean over its seeds of the final `metric`, where a trial
    that did not finish (diverged, stopped early, error) counts as the worst value (+inf for
    min, -inf for max), so such configurations rank last. Ties on the score (e.g. F1 = 1 at
    many rates) go to the larger (max) or smaller (min) mean over seeds of `mean.<metric>`
    (the area under the metric's curve: the configuration that got there sooner), then to
    the configuration's params as text. Returns one row per configuration: `place` (1 = the
    best), `algorithm`, `config` (its params as text), `score`, `speed` (the tie-break, NaN
    if not logged) and `run_ids` (its trials, by seed)."""
    columns = ["place", "algorithm", "config", "score", "speed", "run_ids"]
    if trials.empty or metric not in trials:
        return pd.DataFrame(columns=columns)
    worst = math.inf if mode == "min" else -math.inf
    params = [p for p in trials.attrs["params"] if p != "seed"]
    finished = (trials["status"] == "finished") & trials[metric].notna()
    frame = pd.DataFrame({
        "algorithm": trials["algorithm"],
        "config": trials[params].map(str).agg("|".join, axis=1),
        "score": trials[metric].where(finished, worst).astype(float),
        "speed": (trials[f"mean.{metric}"].astype(float) if f"mean.{metric}" in trials
                  else pd.Series(math.nan, index=trials.index)),
        "seed": trials["seed"] if "seed" in trials else 0, "run_id": trials["run_id"]})
    frame = frame.sort_values("seed", kind="stable")
    groups = frame.groupby(["algorithm", "config"], sort=True)
    table = groups.agg(score=("score", "mean"), speed=("speed", "mean"),
                       run_ids=("run_id", list)).reset_index()
    sign = 1.0 if mode == "min" else -1.0  # sort ascending on sign * value: best first
    table = table.assign(_score=sign * table["score"], _speed=sign * table["speed"])
    table = table.sort_values(["_score", "_speed", "config"], na_position="last", kind="stable")
    table = table.drop(columns=["_score", "_speed"]).reset_index(drop=True)
    table.insert(0, "place", range(1, len(table) + 1))
    return table[columns]


def best_per_algorithm(trials: pd.DataFrame, metric: str, mode: str) -> pd.DataFrame:
    """Best configuration per algorithm, seeds pooled: each algorithm's first configuration
    in `rank_configurations` whose score is finite (an algorithm whose every configuration
    has a trial that did not finish gets no best). Returns one row per algorithm, best first
    (by `place`): `algorithm`, `place`, `score`, `seeds`, `run_ids`, the config (dotted keys)
    and the mean final value of every metric over the configuration's trials.
    """
    ranked = rank_configurations(trials, metric, mode)
    if ranked.empty:
        return pd.DataFrame()
    params = [p for p in trials.attrs["params"] if p != "seed"]
    out = []
    for _, top in ranked[np.isfinite(ranked["score"])].groupby("algorithm", sort=False).head(1).iterrows():
        members = trials[trials["run_id"].isin(top["run_ids"])]
        out.append({"algorithm": top["algorithm"], "place": int(top["place"]), "score": float(top["score"]),
                    "seeds": sorted(members["seed"].tolist()) if "seed" in members else [],
                    "run_ids": members["run_id"].tolist(),
                    **members.iloc[0][params].to_dict(),
                    **{m: float(members[m].mean()) for m in trials.attrs["metrics"]}})
    best = pd.DataFrame(out)
    best.attrs.update(params=params, metrics=trials.attrs["metrics"])
    return best


def run_ranks(trials: pd.DataFrame, metric: str, mode: str) -> dict[str, str]:
    """Run id -> its place among the sweep's runs as zero-padded text ("0001" first): the
    configurations in `rank_configurations` order, a configuration's runs by seed. MLflow's
    UI sorts the runs by this tag (`links.trials_url`), so its first rows are the verdict's
    winner, whatever the ties on the metric."""
    ranked = rank_configurations(trials, metric, mode)
    ids = [r for run_ids in ranked["run_ids"] for r in run_ids]
    width = max(4, len(str(len(ids))))
    return {r: str(i).zfill(width) for i, r in enumerate(ids, start=1)}
