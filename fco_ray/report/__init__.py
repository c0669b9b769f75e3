"""Sweep reports: the papers' figures from a sweep's MLflow runs, as one HTML page.

`render_report(sweep)` reads the sweep's parent and child runs, and writes to `out_dir`
(default `./reports/<sweep name>/`), then attaches the same files to the parent run under
the artifact folder `report/`:

- `curve_<metric>.png` + `.json`: per algorithm, its best configuration's metric vs round,
  mean +- std over seeds (the JSON holds every plotted number and each seed's series);
- `heatmap_<metric>.png` + `.json`: final metric, mean over seeds, over the client_lr x
  server_lr grid; cells whose trials did not all finish are hatched and say why;
- `best.csv`: the best configuration of each algorithm, final metrics mean and std;
- `images/<algorithm>_<name>`: image artifacts of the best runs (e.g. the adversarial attack);
- `report.json` (what was drawn from where) and `index.html` (all of it, self-contained).

What is plotted comes from a dashboard (`dashboards/*.yaml`, see `dashboard.py`).
"""
from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from ..config import ConfigError
from .dashboard import Curve, Dashboard, Heatmap, available, find_dashboard, load_dashboard
from .data import SweepData, grid_cells, load_sweep
from .figures import colors, curve_figure, heatmap_figure, save
from .page import render_page

ARTIFACT_DIR = "report"
log = logging.getLogger(__name__)
MAX_GRID_VALUES = 15  # more distinct values on a heatmap axis: a random search, not a grid


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def _curves(dash: Dashboard, metrics: list[str], ranked: str) -> list[Curve]:
    if dash.curves is not None:
        return list(dash.curves)
    # the tuning metric first, the rest alphabetically
    return [Curve(metric=m) for m in sorted(metrics, key=lambda m: (m != ranked, m))]


def _best_table(best: dict[str, pd.DataFrame], params: list[str], table_metrics: list[str]) -> pd.DataFrame:
    """One row per algorithm: seeds, swept hyperparameters, mean and std over seeds of each
    table metric's final value, run ids."""
    rows = []
    for alg, g in sorted(best.items()):
        row = {"algorithm": alg, "seeds": len(g)}
        row.update({p: g[p].iloc[0] for p in params if p != "algorithm.name"})
        for m in table_metrics:
            row[m] = g[m].mean()
            row[f"{m}_std"] = g[m].std(ddof=1) if len(g) > 1 else 0.0
        row["run_ids"] = " ".join(g["run_id"])
        rows.append(row)
    return pd.DataFrame(rows)


def _display(table: pd.DataFrame, table_metrics: list[str], ranked: str,
             mode: str) -> tuple[list[str], list[list[str]]]:
    """The HTML table: `mean ± std` per table metric, the ranking metric's header says so;
    run ids are left to best.csv."""
    columns = [c for c in table.columns
               if c != "run_ids" and not (c.endswith("_std") and c[:-4] in table_metrics)]

    def cell(row, c):
        return f"{_fmt(row[c])} ± {_fmt(row[c + '_std'])}" if c in table_metrics else _fmt(row[c])
    headers = [f"{c} (ranked, {mode})" if c == ranked else c for c in columns]
    return headers, [[cell(row, c) for c in columns] for _, row in table.iterrows()]


def _images(data: SweepData, best: dict[str, pd.DataFrame], names: list[str], stage: Path,
            notes: list[str]) -> list[tuple[Path, str, str]]:
    """Copy each algorithm's first best run's image artifact `name` into `stage/images/`."""
    found = []
    for name in names:
        folder = str(Path(name).parent) if Path(name).parent != Path(".") else None
        for alg, g in sorted(best.items()):
            run = next((r for r in g["run_id"] if name in
                        {f.path for f in data.client.list_artifacts(r, folder)}), None)
            if run is None:
                notes.append(f"{alg}: its best runs logged no artifact {name!r}")
                continue
            dest = stage / "images" / f"{_slug(alg)}_{_slug(Path(name).name)}"
            dest.parent.mkdir(exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                shutil.move(data.client.download_artifacts(run, name, tmp), dest)
            seed = g.loc[g["run_id"] == run, "seed"].iloc[0] if "seed" in g else "?"
            found.append((dest, f"{alg} {name}", f"{alg}: {name} of its best configuration (seed {seed})"))
    return found


def render_report(sweep: str, tracking_uri: str | None = None, out_dir: str | Path | None = None,
                  dashboard: str | Path | None = None) -> Path:
    """Render sweep `sweep` (name or parent run id) and return the path of its `index.html`.

    `dashboard`: a name in `dashboards/` or a path; default the sweep file's `report` key,
    else the dashboard listing the sweep's problem, else `default`. Raises `ConfigError` for
    an unknown sweep or dashboard, or a sweep without a tuning metric."""
    data = load_sweep(sweep, tracking_uri)
    choice = dashboard if dashboard is not None else data.sweep.get("report")
    if choice is not None and not isinstance(choice, (str, Path, bool)):
        raise ConfigError(f"sweep {data.name}: report: expected a dashboard name or path (or false: "
                          f"no report at the end of the sweep), got {choice!r}")
    dash = find_dashboard(choice if isinstance(choice, (str, Path)) else None, data.problem)
    metric, mode = data.ranking(dash.metric, dash.mode)
    trials, logged = data.trials, data.trials.attrs.get("metrics", [])
    best = data.best_groups(metric, mode) if len(trials) else {}
    params = data.params()
    palette = colors(sorted(trials["algorithm"].unique()) if len(trials) else [])
    notes: list[str] = []
    manifest = {"sweep": data.name, "parent_run_id": data.run_id, "experiment": data.experiment,
                "tracking_uri": data.client.tracking_uri, "dashboard": dash.name, "metric": metric,
                "mode": mode, "figures": []}
    curves_shown, heatmaps_shown = [], []
    out = Path(out_dir) if out_dir is not None else Path.cwd() / "reports" / _slug(data.name)

    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp)

        def write(stem: str, fig, payload: dict, kind: str, caption: str, shown: list) -> None:
            save(fig, stage / f"{stem}.png")
            (stage / f"{stem}.json").write_text(json.dumps(payload, indent=1))
            manifest["figures"].append({"kind": kind, "metric": payload["metric"],
                                        "png": f"{stem}.png", "data": f"{stem}.json"})
            shown.append((stage / f"{stem}.png", f"{kind} {payload['metric']}", caption))

        curves = _curves(dash, logged, metric)
        for curve in curves:
            if curve.metric not in logged:
                notes.append(f"metric {curve.metric!r} (dashboard {dash.name}) was not logged by this sweep")
                continue
            series = {alg: {run: data.history(run, curve.metric) for run in g["run_id"]} for alg, g in best.items()}
            series = {alg: {r: s for r, s in runs.items() if len(s)} for alg, runs in series.items()}
            series = {alg: runs for alg, runs in series.items() if runs}
            if not series:
                continue
            seeds = {alg: dict(zip(g["run_id"], g["seed"].astype(int))) if "seed" in g else
                     {r: -1 for r in g["run_id"]} for alg, g in best.items()}
            fig, payload = curve_figure(curve, series, seeds, palette)
            write(f"curve_{_slug(curve.metric)}", fig, payload, "curve",
                  f"{curve.metric}: best configuration per algorithm, mean ± std over seeds", curves_shown)

        for spec in dash.heatmaps:
            m = spec.metric or metric
            missing = [k for k in (spec.x, spec.y) if k not in trials]
            if m not in logged or missing:
                notes.append(f"heatmap of {m!r} over {spec.x} x {spec.y} skipped: "
                             f"{'not logged: ' + m if m not in logged else 'no such params: ' + str(missing)}")
                continue
            if max(trials[spec.x].nunique(), trials[spec.y].nunique()) > MAX_GRID_VALUES:
                notes.append(f"heatmap of {m!r} skipped: more than {MAX_GRID_VALUES} distinct values "
                             f"of {spec.x} or {spec.y} (a random search, not a grid)")
                continue
            others = [p for p in params if p not in (spec.x, spec.y)]
            cells = {alg: grid_cells(rows, spec.x, spec.y, m, metric, mode, others)
                     for alg, rows in trials.groupby("algorithm")}
            fig, payload = heatmap_figure(spec, m, cells)
            write(f"heatmap_{_slug(m)}", fig, payload, "heatmap",
                  f"final {m}, mean over seeds, over {spec.x} x {spec.y} (hatched: not all seeds "
                  "finished)", heatmaps_shown)

        logged_curves = [c.metric for c in curves if c.metric in logged]
        listed = dash.table if dash.table is not None else logged_curves
        table_metrics = [m for m in dict.fromkeys([metric, *listed]) if m in logged]  # ranked first
        table = _best_table(best, params, table_metrics)
        table.to_csv(stage / "best.csv", index=False)
        manifest["table"] = "best.csv"
        images = _images(data, best, dash.images, stage, notes)
        manifest["figures"] += [{"kind": "image", "png": str(p.relative_to(stage))} for p, _, _ in images]
        manifest["notes"] = notes
        (stage / "report.json").write_text(json.dumps(manifest, indent=1))

        status = trials["status"].value_counts().to_dict() if len(trials) else {}
        summary = {"sweep": data.name, "experiment": data.experiment, "parent run": data.run_id,
                   "problem": str(data.problem), "ranked by": f"{metric} ({mode}), mean final value over seeds",
                   "trials": ", ".join(f"{n} {s}" for s, n in sorted(status.items())) or "none",
                   "dashboard": dash.name,
                   "rendered": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
        page = render_page(dash.title or f"Sweep {data.name}", summary, _display(table, table_metrics, metric, mode),
                           [("Metric vs round", "curve", curves_shown),
                            ("Final metric over the learning-rate grid", "heatmap", heatmaps_shown),
                            ("Images", "image", images)], notes)
        (stage / "index.html").write_text(page)

        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(stage, out, dirs_exist_ok=True)
        data.client.log_artifacts(data.run_id, str(stage), ARTIFACT_DIR)
    return out / "index.html"


def report_after_sweep(parent_run_id: str, tracking_uri: str, echo=print) -> Path | None:
    """The report at the end of `fco-ray sweep`. The sweep's results are already in MLflow, so
    a failure here is a logged warning, never an error: rerun `fco-ray report` later."""
    try:
        index = render_report(parent_run_id, tracking_uri=tracking_uri)
    except Exception as e:  # noqa: BLE001 - see the docstring
        log.warning("sweep report failed (%s: %s); the runs are in MLflow, retry with "
                    "`fco-ray report %s --tracking-uri %s`", type(e).__name__, e, parent_run_id,
                    tracking_uri)
        return None
    echo(f"report: {index} (also attached to the parent run under {ARTIFACT_DIR}/)")
    return index


__all__ = ["ARTIFACT_DIR", "Curve", "Dashboard", "Heatmap", "available", "find_dashboard",
           "load_dashboard", "load_sweep", "render_report", "report_after_sweep"]
