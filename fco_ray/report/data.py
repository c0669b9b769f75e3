"""A sweep's runs, read back from MLflow (layout: `fco_ray.tracking`) into pandas.

`load_sweep` finds the sweep's parent run, its sweep file (artifact `sweep.yaml`) and its
child runs (one row per trial, final metric values); `best_groups` picks each algorithm's
best configuration (`tracking.queries.best_per_algorithm`, the one ranking); `history` reads
one run's per-round series; `grid_cells` aggregates trials over a two-hyperparameter grid for
the heatmaps.
"""
from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass

import numpy as np
import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.exceptions import MlflowException

from ..runtime.errors import ConfigError
from ..runtime.files import MAX_CONFIG_BYTES, check_sweep_key, parse_yaml, read_text
from ..tracking.queries import best_per_algorithm, trials_frame
from ..tracking.store import ALGORITHM, PARENT, ROLE, SWEEP, Store, filter_tags

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
# why a cell/trial has no final value, most telling first
NOT_FINISHED = ("diverged", "error", "stopped", "running")


@dataclass
class SweepData:
    client: MlflowClient
    parent: Run
    experiment: str
    sweep: dict          # the sweep file as logged (artifact sweep.yaml); {} if absent
    trials: pd.DataFrame  # tracking.trials_frame of the child runs

    @property
    def name(self) -> str:
        return self.parent.data.tags.get(SWEEP) or self.parent.info.run_name

    @property
    def run_id(self) -> str:
        return self.parent.info.run_id

    @property
    def problem(self) -> str | None:
        problem = self.sweep.get("problem")
        if isinstance(problem, dict) and problem.get("name"):
            return str(problem["name"])
        if "problem.name" in self.trials:
            names = self.trials["problem.name"].dropna()
            return str(names.iloc[0]) if len(names) else None
        return None

    def ranking(self, fallback_metric: str | None, fallback_mode: str | None) -> tuple[str, str]:
        """The sweep's tuning metric and mode: parent tags `fco.metric`/`fco.mode`, else the
        sweep file's `tune`, else the dashboard's fallback."""
        tags, tune = self.parent.data.tags, self.sweep.get("tune") or {}
        metric = tags.get("fco.metric") or tune.get("metric") or fallback_metric
        mode = tags.get("fco.mode") or tune.get("mode") or fallback_mode
        if not metric or mode not in ("min", "max"):
            raise ConfigError(f"sweep {self.name!r} records no tuning metric/mode (tags fco.metric, "
                              f"fco.mode or tune.metric, tune.mode in sweep.yaml; got {metric!r}, "
                              f"{mode!r}) and the dashboard sets none (keys metric, mode)")
        return metric, mode

    def params(self) -> list[str]:
        """Hyperparameter keys that vary across the sweep's trials (seed excluded)."""
        keys = [p for p in self.trials.attrs.get("params", []) if p != "seed"]
        return [p for p in keys if self.trials[p].astype(str).nunique() > 1]

    def best_groups(self, metric: str, mode: str) -> dict[str, pd.DataFrame]:
        """Algorithm -> the trials (one per seed) of its best configuration, best algorithm
        first: `tracking.best_per_algorithm` on the final values, i.e. the one ranking of
        fco-ray (`tracking.queries.rank_configurations`, with its tie-break) that also orders
        the verdict, `fco-ray runs --best` and the MLflow link's run list. The parent's
        `fco.best.<algorithm>` tags are not read: a sweep recorded before the tie-break existed
        names another configuration there. Algorithms without a finished configuration are
        left out."""
        best = best_per_algorithm(self.trials, metric, mode)
        out = {}
        for row in best.to_dict("records"):
            members = self.trials[self.trials["run_id"].isin(row["run_ids"])]
            out[row["algorithm"]] = members.sort_values("seed") if "seed" in members else members
        return out

    def history(self, run_id: str, metric: str) -> pd.Series:
        """One run's `metric` by round (step); a step logged twice keeps its latest value."""
        points = sorted(self.client.get_metric_history(run_id, metric), key=lambda m: (m.step, m.timestamp))
        values = {m.step: m.value for m in points}
        return pd.Series(list(values.values()), index=pd.Index(list(values), name="round"),
                         dtype=float, name=metric)


def find_parent(client: MlflowClient, key: str) -> Run:
    """The parent run with id `key`, else the latest parent run of the sweep named `key`."""
    check_sweep_key(key, "report")  # a quote would break the search filter below
    if RUN_ID.match(key):
        try:
            return client.get_run(key)
        except MlflowException:  # no such run: try it as a sweep name
            pass
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, filter_tags(**{ROLE: "sweep", SWEEP: key}),
                              order_by=["attributes.start_time DESC"], max_results=1) if experiments else []
    if not runs:
        names = sorted({r.data.tags.get(SWEEP, "?") for r in client.search_runs(
            experiments, filter_tags(**{ROLE: "sweep"}), max_results=200)}) if experiments else []
        raise ConfigError(f"report: no sweep named {key!r} (nor a parent run with that id) in "
                          f"{client.tracking_uri}; sweeps there: {names}")
    return runs[0]


def _sweep_file(client: MlflowClient, run_id: str) -> dict:
    if "sweep.yaml" not in {f.path for f in client.list_artifacts(run_id)}:
        return {}
    # an artifact is input like any file: the bounded reader and loader (size, UTF-8,
    # aliases, no Python objects), its errors a ConfigError naming the run
    with tempfile.TemporaryDirectory() as tmp:
        local = client.download_artifacts(run_id, "sweep.yaml", tmp)
        try:
            loaded = parse_yaml(read_text(local, "sweep.yaml artifact", MAX_CONFIG_BYTES),
                                f"run {run_id} sweep.yaml")
        except ConfigError as e:
            raise ConfigError(f"sweep parent run {run_id}: {e}") from None
    return loaded if isinstance(loaded, dict) else {}


def load_sweep(key: str, tracking_uri: str | None = None) -> SweepData:
    """Read sweep `key` (name or parent run id) from the tracking store."""
    store = Store(tracking_uri)
    parent = find_parent(store.client, key)
    runs = store.search(parent.info.experiment_id, filter_tags(**{PARENT: parent.info.run_id}))
    runs = [r for r in runs if r.data.tags.get(ROLE, "trial") == "trial" and r.data.tags.get(ALGORITHM)]
    experiment = store.client.get_experiment(parent.info.experiment_id).name
    return SweepData(store.client, parent, experiment, _sweep_file(store.client, parent.info.run_id),
                     trials_frame(runs))


def combined_status(statuses: pd.Series) -> str:
    """`finished` when every seed finished, else the most telling reason one did not."""
    present = set(statuses.fillna("unknown"))
    if present == {"finished"}:
        return "finished"
    return next((s for s in NOT_FINISHED if s in present), "unknown")


def grid_cells(rows: pd.DataFrame, x: str, y: str, metric: str, rank_metric: str, mode: str,
               params: list[str]) -> pd.DataFrame:
    """One row per (x, y) cell: `value` = mean over seeds of the final `metric` when every seed
    finished (else NaN and `status` says why), `seeds`, `run_ids`.

    A configuration is its x, y and other `params` values (seed aside); when those others
    vary, a cell shows the configuration the sweep would pick there: the best mean final
    `rank_metric` (by `mode`) among its fully finished configurations."""
    # map(str) (not astype(str)): pandas' string dtype keeps NaN, e.g. for a hyperparameter
    # that only some algorithms have, and "|".join would fail on it
    config = rows[[x, y, *params]].map(str).agg("|".join, axis=1)
    groups = []
    for _, g in rows.groupby(config):
        status = combined_status(g["status"])
        finished = status == "finished"
        groups.append({x: g[x].iloc[0], y: g[y].iloc[0], "status": status,
                       "value": float(g[metric].mean()) if finished and metric in g else np.nan,
                       "rank": float(g[rank_metric].mean()) if finished and rank_metric in g else np.nan,
                       "seeds": len(g), "run_ids": g["run_id"].tolist()})
    cells = pd.DataFrame(groups)
    if cells.empty:
        return cells
    # best rank first (finished before not), then keep the first row of every cell
    order = cells["rank"] if mode == "min" else -cells["rank"]
    cells = cells.assign(_order=order.fillna(np.inf)).sort_values("_order", kind="stable")
    return cells.drop_duplicates([x, y]).drop(columns=["_order", "rank"]).reset_index(drop=True)
