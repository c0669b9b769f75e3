"""Links into the MLflow UI: a run, a sweep's trials (chart view), a comparison."""
from __future__ import annotations

import json
import os
from urllib.parse import quote

from .store import PARENT

DEFAULT_UI = "http://127.0.0.1:5000"  # where `mlflow ui --host 127.0.0.1` serves


UI_ENV = "FCO_RAY_MLFLOW_UI"


def ui_base(tracking_uri: str, explicit: str | None = None) -> str:
    """The MLflow UI the report links to: `explicit`, else $FCO_RAY_MLFLOW_UI, else the
    tracking server itself when the store is one (`http(s)://`), else `mlflow ui`'s default
    address http://127.0.0.1:5000."""
    base = explicit or os.environ.get(UI_ENV)
    if not base and tracking_uri.startswith(("http://", "https://")):
        base = tracking_uri
    return (base or DEFAULT_UI).rstrip("/")


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"


def trials_url(base: str, experiment_id: str, parent_run_id: str, metric: str | None = None,
               mode: str = "min") -> str:
    """One sweep's trials in MLflow 3's chart view of the experiment (`compareRunsMode=CHART`):
    each metric's per-round curves, one line per trial (not folded under the parent run),
    the run list beside them best first by the ranked `metric`'s final value (MLflow's latest
    value of the series). Its UI takes `workflowType` (the GenAI / Model training switch,
    which wins over the experiment tag), `compareRunsMode` and the search `searchFilter`,
    `orderByKey`, `orderByAsc` from the URL."""
    query = {"workflowType": "machine_learning", "compareRunsMode": "CHART",
             "searchFilter": f"tags.`{PARENT}` = '{parent_run_id}'"}
    if metric:
        query.update(orderByKey=f"metrics.`{metric}`", orderByAsc=str(mode == "min").lower())
    return f"{base}/#/experiments/{experiment_id}/runs?" + "&".join(
        f"{k}={quote(v, safe='')}" for k, v in query.items())


def compare_url(base: str, experiment_id: str, run_ids: list[str]) -> str:
    """MLflow's compare view of some runs (parallel coordinates, scatter, contour)."""
    runs = quote(json.dumps(run_ids, separators=(",", ":")))
    return f"{base}/#/compare-runs?runs={runs}&experiments={quote(json.dumps([experiment_id]))}"
