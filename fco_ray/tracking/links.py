"""Links into the MLflow UI: an experiment, a run, a sweep's trials (chart view), a comparison.

MLflow 3's UI (3.17) opens an experiment in its GenAI view or its model-training view by its
"workflow type": the URL's `workflowType` parameter, else the last choice of the sidebar's
switch kept in the browser, else GenAI; the experiment tag `mlflow.experimentKind` is not
read while that switch exists (its bundled UI code; mlflow/mlflow PR #20161 replaced the
experiment page's type selector by that global switch). So every link here carries
`workflowType=machine_learning`.
"""
from __future__ import annotations

import json
import os
from urllib.parse import quote

from .store import PARENT, RANK

DEFAULT_UI = "http://127.0.0.1:5000"  # where `mlflow ui --host 127.0.0.1` serves


UI_ENV = "FCO_RAY_MLFLOW_UI"


TRAINING_VIEW = {"workflowType": "machine_learning"}  # not GenAI (module docstring)


def ui_base(tracking_uri: str, explicit: str | None = None) -> str:
    """The MLflow UI the report links to: `explicit`, else $FCO_RAY_MLFLOW_UI, else the
    tracking server itself when the store is one (`http(s)://`), else `mlflow ui`'s default
    address http://127.0.0.1:5000."""
    base = explicit or os.environ.get(UI_ENV)
    if not base and tracking_uri.startswith(("http://", "https://")):
        base = tracking_uri
    return (base or DEFAULT_UI).rstrip("/")


def _query(values: dict[str, str]) -> str:
    return "&".join(f"{k}={quote(v, safe='')}" for k, v in values.items())


def experiment_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table in the model-training view."""
    return f"{base}/#/experiments/{experiment_id}/runs?{_query(TRAINING_VIEW)}"


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    """One run's page (its overview, metrics, artifacts) in the model-training view."""
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{_query(TRAINING_VIEW)}"


def trials_url(base: str, experiment_id: str, parent_run_id: str, metric: str | None = None,
               mode: str = "min") -> str:
    """One sweep's trials in MLflow 3's chart view of the experiment (`compareRunsMode=CHART`):
    each metric's per-round curves, one line per trial (not folded under the parent run),
    and, given the sweep's ranked `metric`, the run list beside them in the sweep's ranking
    (tag `fco.rank`, written when the sweep ends from `metric` and `mode`: the verdict's
    winner first, ties on the metric broken as the verdict breaks them; MLflow's own sort by
    the metric cannot break them). Its UI takes `workflowType`, `compareRunsMode` and the
    search's `searchFilter`, `orderByKey`, `orderByAsc` from the URL."""
    query = {**TRAINING_VIEW, "compareRunsMode": "CHART",
             "searchFilter": f"tags.`{PARENT}` = '{parent_run_id}'",
             "orderByKey": f"tags.`{RANK}`", "orderByAsc": "true"}
    if metric is None:
        query.pop("orderByKey"), query.pop("orderByAsc")
    return f"{base}/#/experiments/{experiment_id}/runs?{_query(query)}"


def compare_url(base: str, experiment_id: str, run_ids: list[str]) -> str:
    """MLflow's compare view of some runs (parallel coordinates, scatter, contour)."""
    runs = quote(json.dumps(run_ids, separators=(",", ":")))
    return (f"{base}/#/compare-runs?runs={runs}&experiments={quote(json.dumps([experiment_id]))}"
            f"&{_query(TRAINING_VIEW)}")
