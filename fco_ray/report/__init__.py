"""Sweep reports: the papers' figures from a sweep's MLflow runs, as one HTML page.

`render_report(sweep)` reads the sweep's parent and child runs, and writes to `out_dir`
(default `./reports/<sweep name>/`), then attaches the same files to the parent run under
the artifact folder `report/`:

- `curve_<metric>.png` + `.json`: per algorithm, its best configuration's metric vs round,
  mean +- std over seeds (the JSON holds every plotted number and each seed's series);
- `grid_<metric>.png` + `.json`: the same metric for every configuration of the grid, one
  panel per algorithm, the best configuration highlighted;
- `heatmap_<metric>.png` + `.json`: final metric, mean over seeds, over the client_lr x
  server_lr grid; cells whose trials did not all finish are hatched and say why;
- `best.csv`: the best configuration of each algorithm, final metrics mean and std;
- `images/<algorithm>_<name>`: image artifacts of the best runs (e.g. the adversarial attack);
- `report.json` (what was drawn from where, warnings, the files written) and `index.html`
  (all of it, self-contained, with links to every run in the MLflow UI).

The page warns when an algorithm's best configuration takes the smallest or largest value of
a searched grid axis. Rendering again replaces the previous rendering's files, locally and in
the parent run's `report/` artifacts (no stale figures of another dashboard).

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

from ..runtime.errors import ConfigError
from ..runtime.files import check_no_links, path_inside, write_file, write_replacing
from ..tracking.links import DEFAULT_UI, compare_url, run_url, trials_url, ui_base
from .dashboard import (
    Curve,
    Dashboard,
    Heatmap,
    available,
    find_dashboard,
    load_dashboard,
)
from .data import SweepData, grid_cells, load_sweep
from .figures import colors, curve_figure, grid_figure, heatmap_figure, save
from .grid import MAX_GRID_VALUES, configurations, edge_warnings
from .page import render_page

ARTIFACT_DIR = "report"
FIXED_FILES = ("index.html", "report.json", "best.csv")
log = logging.getLogger(__name__)


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
    """One row per algorithm, in the order of `best` (the ranking's: best first): seeds, swept
    hyperparameters, mean and sample std (NaN with one seed) over seeds of each table metric's
    final value, run ids."""
    rows = []
    for alg, g in best.items():
        row = {"algorithm": alg, "seeds": len(g)}
        row.update({p: g[p].iloc[0] for p in params if p != "algorithm.name"})
        for m in table_metrics:
            row[m] = g[m].mean()
            row[f"{m}_std"] = g[m].std(ddof=1)  # NaN with one seed
        row["run_ids"] = " ".join(g["run_id"])
        rows.append(row)
    return pd.DataFrame(rows)


def _display(table: pd.DataFrame, table_metrics: list[str], ranked: str, mode: str,
             links: dict[str, str]) -> tuple[list[str], list[list]]:
    """The HTML table: `mean ± std` per table metric, the ranking metric's header says so;
    the last column links each seed's run in the MLflow UI (`links`: run id -> URL)."""
    columns = [c for c in table.columns
               if c != "run_ids" and not (c.endswith("_std") and c[:-4] in table_metrics)]

    def cell(row, c):
        if c in table_metrics and pd.notna(row[f"{c}_std"]):
            return f"{_fmt(row[c])} ± {_fmt(row[c + '_std'])}"
        return _fmt(row[c])
    headers = [f"{c} (ranked, {mode})" if c == ranked else c for c in columns] + ["MLflow runs"]
    rows = [[cell(row, c) for c in columns]
            + [[(f"run {k + 1}", links[r]) for k, r in enumerate(row["run_ids"].split())]]
            for _, row in table.iterrows()]
    return headers, rows


def _trials_table(data: SweepData, metric: str, mode: str, links: dict[str, str]) -> tuple[list[str], list[list]]:
    """Every trial: algorithm, searched values, seed, status, final ranked metric, its run."""
    trials, params = data.trials, [p for p in data.params() if p != "algorithm.name"]
    if trials.empty:
        return [], []
    # the one ranking's order (`tracking.queries.run_ranks`): the verdict's, the best table's
    # and the MLflow link's, tie-break included; a run it does not rank (no metric) last
    from ..tracking.queries import run_ranks

    place = run_ranks(trials, metric, mode) if metric in trials else {}
    trials = trials.assign(_place=trials["run_id"].map(place).fillna("~")).sort_values(
        ["_place", "algorithm"], kind="stable")
    columns = ["algorithm", *params, *(["seed"] if "seed" in trials else []), "status",
               *([metric] if metric in trials else [])]
    rows = [[_fmt(row[c]) for c in columns] + [[("open", links[row["run_id"]])]]
            for _, row in trials.iterrows()]
    return [c.split(".")[-1] if c.startswith("algorithm.") else c for c in columns] + ["MLflow run"], rows


def _searched(data: SweepData) -> list[str]:
    """The sweep file's searched keys (grid, then random), else the params that vary."""
    search = data.sweep.get("search") if isinstance(data.sweep.get("search"), dict) else {}
    keys = [*(search.get("grid") or {}), *(search.get("random") or {})]
    return keys or data.params()


def _verdict(data: SweepData, metric: str, mode: str) -> list[str]:
    """The verdict `fco-ray sweep` printed at its end (`verdict.verdict_lines`),
    computed again from the runs in MLflow: the same ranking, the same sentences."""
    from .verdict import verdict_lines
    from ..tracking.queries import best_per_algorithm

    if data.trials.empty or metric not in data.trials:
        return []
    best = best_per_algorithm(data.trials, metric, mode)
    return verdict_lines(best, data.trials, metric, mode, _searched(data))


def _title(data: SweepData, dash: Dashboard) -> str:
    """`Sweep <name>: <the dashboard's title>`. A dashboard titled after a paper's experiment
    (`E1 federated LASSO: ...`) keeps the key only when every trial ran that experiment's
    setting (`experiments.nearest`, as the verdict decides); else the key is left out."""
    if not dash.title:
        return f"Sweep {data.name}"
    title = dash.title
    key = re.match(r"(E\d+) (.*)", title)
    if key and len(data.trials):
        from ..experiments import nearest

        experiment, differs = nearest(data.trials.to_dict("records"))
        if experiment is None or experiment.key != key.group(1) or differs:
            title = key.group(2)[:1].upper() + key.group(2)[1:]
    return f"Sweep {data.name}: {title}"


class _Stage:
    """A report's files, written to a temporary folder first (then copied to the output folder
    and uploaded to MLflow, so both get exactly the files of this rendering), and the
    manifest listing them."""

    def __init__(self, path: Path):
        self.path, self.figures, self.notes = path, [], []
        self.shown: dict[str, list[tuple[Path, str, str]]] = {"curve": [], "grid": [], "heatmap": [],
                                                              "image": []}

    def figure(self, kind: str, fig, payload: dict, caption: str) -> None:
        stem = f"{kind}_{_slug(payload['metric'])}"
        save(fig, self.path / f"{stem}.png")
        write_file(self.path / f"{stem}.json", json.dumps(payload, indent=1))
        self.figures.append({"kind": kind, "metric": payload["metric"], "png": f"{stem}.png",
                             "data": f"{stem}.json"})
        self.shown[kind].append((self.path / f"{stem}.png", f"{kind} {payload['metric']}", caption))

    def image(self, name: str, src: str, alt: str, caption: str) -> None:
        dest = self.path / "images" / name
        dest.parent.mkdir(exist_ok=True)
        shutil.move(src, dest)
        self.figures.append({"kind": "image", "png": f"images/{name}"})
        self.shown["image"].append((dest, alt, caption))


def _draw_curves(data: SweepData, curves: list[Curve], best: dict[str, pd.DataFrame],
                 palette: dict[str, str], stage: _Stage, dashboard: str) -> None:
    logged = data.trials.attrs.get("metrics", [])
    seeds = ({r: int(s) for r, s in zip(data.trials["run_id"], data.trials["seed"]) if pd.notna(s)}
             if "seed" in data.trials else {})
    for curve in curves:
        if curve.metric not in logged:
            stage.notes.append(f"metric {curve.metric!r} (dashboard {dashboard}) was not logged by this sweep")
            continue
        series = {alg: {run: data.history(run, curve.metric) for run in g["run_id"]} for alg, g in best.items()}
        series = {alg: {r: s for r, s in runs.items() if len(s)} for alg, runs in series.items()}
        series = {alg: runs for alg, runs in series.items() if runs}
        if series:
            fig, payload = curve_figure(curve, series, seeds, palette)
            stage.figure("curve", fig, payload,
                         f"{curve.metric}: best configuration per algorithm, mean ± std over seeds")


def _draw_grid_curves(data: SweepData, curves: list[Curve], best: dict[str, pd.DataFrame],
                      stage: _Stage, dashboard: str) -> None:
    """Every configuration's curve, per algorithm (`figures.grid_figure`)."""
    logged = data.trials.attrs.get("metrics", [])
    if data.trials.empty:
        return
    seeds = ({r: int(s) for r, s in zip(data.trials["run_id"], data.trials["seed"]) if pd.notna(s)}
             if "seed" in data.trials else {})
    best_runs = {alg: set(g["run_id"]) for alg, g in best.items()}
    for curve in curves:
        if curve.metric not in logged:
            stage.notes.append(f"metric {curve.metric!r} (grid curves, dashboard {dashboard}) was "
                               "not logged by this sweep")
            continue
        panels = {}
        for alg in sorted(data.trials["algorithm"].dropna().unique()):
            configs = []
            for config in configurations(data, alg):
                series = {r: data.history(r, curve.metric) for r in config["run_ids"]}
                series = {r: s for r, s in series.items() if len(s)}
                if series:
                    configs.append({**config, "series": series,
                                    "best": set(config["run_ids"]) == best_runs.get(alg)})
            if configs:
                panels[alg] = configs
        if panels:
            fig, payload = grid_figure(curve, panels, seeds)
            stage.figure("grid", fig, payload, f"{curve.metric}: every configuration of the grid, "
                                               "mean over seeds; black: the best configuration")


def _draw_heatmaps(data: SweepData, heatmaps: list[Heatmap], metric: str, mode: str,
                   stage: _Stage) -> None:
    trials, logged, params = data.trials, data.trials.attrs.get("metrics", []), data.params()
    for spec in heatmaps:
        m = spec.metric or metric
        missing = [k for k in (spec.x, spec.y) if k not in trials]
        if m not in logged or missing:
            why = f"not logged: {m}" if m not in logged else f"no such params: {missing}"
            stage.notes.append(f"heatmap of {m!r} over {spec.x} x {spec.y} skipped: {why}")
            continue
        if max(trials[spec.x].nunique(), trials[spec.y].nunique()) > MAX_GRID_VALUES:
            stage.notes.append(f"heatmap of {m!r} skipped: more than {MAX_GRID_VALUES} distinct values "
                               f"of {spec.x} or {spec.y} (a random search, not a grid)")
            continue
        others = [p for p in params if p not in (spec.x, spec.y)]
        on_grid = trials.dropna(subset=[spec.x, spec.y])  # e.g. a baseline without server_lr
        cells = {alg: grid_cells(rows, spec.x, spec.y, m, metric, mode, others)
                 for alg, rows in on_grid.groupby("algorithm")}
        fig, payload = heatmap_figure(spec, m, cells)
        stage.figure("heatmap", fig, payload, f"final {m}, mean over seeds, over {spec.x} x {spec.y} "
                                              "(hatched: not all seeds finished)")


def _copy_images(data: SweepData, best: dict[str, pd.DataFrame], names: list[str], stage: _Stage) -> None:
    """Each algorithm's image artifact `name` from the first of its best runs that has one."""
    for name in names:
        folder = str(Path(name).parent) if Path(name).parent != Path(".") else None
        for alg, g in sorted(best.items()):
            run = next((r for r in g["run_id"] if name in
                        {f.path for f in data.client.list_artifacts(r, folder)}), None)
            if run is None:
                stage.notes.append(f"{alg}: its best runs logged no artifact {name!r}")
                continue
            seed = g.loc[g["run_id"] == run, "seed"].iloc[0] if "seed" in g else "?"
            with tempfile.TemporaryDirectory() as tmp:
                stage.image(f"{_slug(alg)}_{_slug(Path(name).name)}",
                            data.client.download_artifacts(run, name, tmp), f"{alg} {name}",
                            f"{alg}: {name} of its best configuration (seed {seed})")


def render_report(sweep: str, tracking_uri: str | None = None, out_dir: str | Path | None = None,
                  dashboard: str | Path | None = None, ui_url: str | None = None) -> Path:
    """Render sweep `sweep` (name or parent run id) and return the path of its `index.html`.

    `dashboard`: a name in `dashboards/` or a path; default the sweep file's `report` key,
    else the dashboard listing the sweep's problem, else `default`. `ui_url`: the MLflow UI
    the page links runs to (see `ui_base`). Raises `ConfigError` for an unknown sweep or
    dashboard, or a sweep without a tuning metric."""
    data = load_sweep(sweep, tracking_uri)
    choice = dashboard if dashboard is not None else data.sweep.get("report")
    if choice is not None and not isinstance(choice, (str, Path, bool)):
        raise ConfigError(f"sweep {data.name}: report: expected a dashboard name or path (or false: "
                          f"no report at the end of the sweep), got {choice!r}")
    dash = find_dashboard(choice if isinstance(choice, (str, Path)) else None, data.problem)
    metric, mode = data.ranking(dash.metric, dash.mode)
    trials, logged = data.trials, data.trials.attrs.get("metrics", [])
    best = data.best_groups(metric, mode) if len(trials) else {}
    curves = _curves(dash, logged, metric)
    grid_curves = (list(dash.grid_curves) if dash.grid_curves is not None
                   else [next((c for c in curves if c.metric == metric), Curve(metric=metric))])
    listed = dash.table if dash.table is not None else [c.metric for c in curves]
    table_metrics = [m for m in dict.fromkeys([metric, *listed]) if m in logged]  # ranked first
    table = _best_table(best, data.params(), table_metrics)
    out = (check_no_links(out_dir, "--out") if out_dir is not None  # nothing behind a link
           else check_no_links(path_inside(Path.cwd() / "reports", _slug(data.name), "sweep name"),
                               "report folder"))
    _check_out(out)  # before anything is drawn: a refused folder costs no rendering
    base = ui_base(data.client.tracking_uri, ui_url)
    experiment_id = data.parent.info.experiment_id
    links = {r: run_url(base, experiment_id, r) for r in trials.get("run_id", [])}
    unfinished = unfinished_note(data)
    warnings = [*([unfinished] if unfinished else []), *edge_warnings(data, best)]

    with tempfile.TemporaryDirectory() as tmp:
        stage = _Stage(Path(tmp))
        palette = colors(list(trials["algorithm"].unique()) if len(trials) else [])
        _draw_curves(data, curves, best, palette, stage, dash.name)
        _draw_grid_curves(data, grid_curves, best, stage, dash.name)
        _draw_heatmaps(data, dash.heatmaps, metric, mode, stage)
        _copy_images(data, best, dash.images, stage)
        write_file(stage.path / "best.csv", table.to_csv(index=False))
        files = sorted([*FIXED_FILES, *(str(f.relative_to(stage.path)) for f in stage.path.rglob("*")
                                        if f.is_file() and f.name not in FIXED_FILES)])
        write_file(stage.path / "report.json", json.dumps({
            "sweep": data.name, "parent_run_id": data.run_id, "experiment": data.experiment,
            "experiment_id": experiment_id, "tracking_uri": data.client.tracking_uri,
            "mlflow_ui": base, "dashboard": dash.name, "metric": metric, "mode": mode,
            "finished": unfinished is None, "parent_status": data.parent.info.status,
            "figures": stage.figures, "table": "best.csv", "warnings": warnings,
            "notes": stage.notes, "files": files}, indent=1))

        status = trials["status"].value_counts().to_dict() if len(trials) else {}
        summary = {"sweep": data.name, **({"state": f"UNFINISHED: {unfinished}"} if unfinished else {}),
                   "experiment": data.experiment,
                   "parent run": [(data.run_id, run_url(base, experiment_id, data.run_id))],
                   "problem": str(data.problem), "ranked by": f"{metric} ({mode}), mean final value over seeds",
                   "trials": ", ".join(f"{n} {s}" for s, n in sorted(status.items())) or "none",
                   "dashboard": dash.name,
                   "rendered": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
        summary["MLflow trials"] = [("every trial, best first", trials_url(base, experiment_id, data.run_id,
                                                                           metric, mode))]
        if len(trials):  # MLflow's compare view: parallel coordinates of the rates vs the metrics
            summary["MLflow compare"] = [
                (f"{alg} ({len(g)} trials)", compare_url(base, experiment_id, g["run_id"].tolist()))
                for alg, g in sorted(trials.groupby("algorithm"), key=lambda item: item[0])]
        page = render_page(_title(data, dash), summary,
                           _display(table, table_metrics, metric, mode, links),
                           [("Metric vs round", "curve", stage.shown["curve"]),
                            ("Every configuration of the grid", "grid", stage.shown["grid"]),
                            ("Final metric over the learning-rate grid", "heatmap", stage.shown["heatmap"]),
                            ("Images", "image", stage.shown["image"])], stage.notes,
                           warnings=warnings, trials=_trials_table(data, metric, mode, links),
                           verdict=_verdict(data, metric, mode))
        write_file(stage.path / "index.html", page)

        _replace_local(stage.path, out)
        _replace_artifacts(data, stage.path)
    return out / "index.html"


def unfinished_note(data: SweepData) -> str | None:
    """A sentence saying that the sweep has not finished, from its MLflow parent run (the sweep
    driver ends it FINISHED after the last trial, KILLED when stopped by Ctrl-C / SIGTERM or
    a full disk, and leaves it RUNNING while it runs or if it was killed outright), else None."""
    status = data.parent.info.status
    if status == "FINISHED":
        return None
    trials = data.trials
    ended = int(trials["status"].isin(["finished", "diverged", "error", "stopped"]).sum()) if len(trials) else 0
    counts = f"{ended} of the {len(trials)} trials logged so far have ended"
    if status in ("RUNNING", "SCHEDULED"):
        return (f"sweep {data.name} still running (its MLflow parent run is {status}; or its driver "
                f"was killed before it could end it): the numbers are partial, {counts}; render "
                "the report again when the sweep has finished")
    return (f"sweep {data.name} did not finish (its MLflow parent run ended {status}): the numbers "
            f"are partial, {counts}; finish it with fco-ray sweep FILE --resume and render the "
            "report again")


def _previous_files(out: Path) -> list[Path]:
    """The files an earlier rendering wrote to `out` (from its report.json), else none: a
    folder we did not write is never cleaned. Every listed name must be a path strictly
    inside `out` (`files.path_inside`): a manifest naming anything else (an absolute path,
    `..`, a link out of the folder) is refused as a whole, before anything is deleted."""
    manifest_path = out / "report.json"
    if manifest_path.is_symlink():  # ours is a plain file: never read one planted elsewhere
        raise ConfigError(f"{manifest_path} is a symbolic link; a report folder's report.json "
                          "is a plain file (remove the link)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(manifest, dict) or "parent_run_id" not in manifest:
        return []
    listed = manifest.get("files")
    if listed is None:  # written before report.json listed its files
        listed = [*FIXED_FILES, *(v for f in manifest.get("figures", []) if isinstance(f, dict)
                                  for k, v in f.items() if k in ("png", "data"))]
    if not isinstance(listed, list):
        raise ConfigError(f"{manifest_path}: 'files' must be a list of file names, got "
                          f"{type(listed).__name__}")
    try:
        return [path_inside(out, f, "file listed in report.json") for f in listed]
    except ConfigError as e:
        raise ConfigError(f"{e} ({manifest_path} was not written by fco-ray as it is: delete it "
                          "if you did not write it)") from None


def _check_out(out: Path) -> None:
    """`out` is a folder (or not there yet) whose report.json, if any, lists only files
    inside it (`_previous_files`); raises ConfigError otherwise."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"report folder {out} is a file, not a folder (give --out a folder)")
    _previous_files(out)


def _replace_local(stage: Path, out: Path) -> None:
    """Copy this rendering to `out`, first removing what an earlier rendering put there.
    Every path written or deleted goes through `files.path_inside`, and every file is
    written as a new file replacing the old (`files.write_replacing`): nothing outside
    `out` changes."""
    _check_out(out)
    new = [f.relative_to(stage) for f in sorted(stage.rglob("*")) if f.is_file()]
    targets = [path_inside(out, str(rel), "report file") for rel in new]  # all checked first
    for old in _previous_files(out):
        if old.is_symlink() or old.is_file():
            old.unlink()
    images = out / "images"
    if images.is_dir() and not images.is_symlink() and not any(images.iterdir()):
        images.rmdir()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"report folder {out} cannot be created ({e.strerror or e})") from None
    for rel, target in zip(new, targets):
        target.parent.mkdir(parents=True, exist_ok=True)
        target = path_inside(out, str(rel), "report file")  # again: its folder exists now
        write_replacing(stage / rel, target)  # a link, hard or symbolic, is replaced


def _replace_artifacts(data: SweepData, stage: Path) -> None:
    """The parent run's `report/` artifacts become exactly this rendering's files: the old
    folder is deleted first (local and `mlflow-artifacts` stores can; for a store that
    cannot, stale files are kept and a warning says so)."""
    client = data.client
    if client.list_artifacts(data.run_id, ARTIFACT_DIR):
        try:
            client._tracking_client._get_artifact_repo(data.run_id).delete_artifacts(ARTIFACT_DIR)
        except Exception as e:  # noqa: BLE001 - S3, GCS, ...: whatever they raise, keep going
            log.warning("could not delete the parent run's old %s/ artifacts (%s: %s); files of an "
                        "earlier rendering may remain there", ARTIFACT_DIR, type(e).__name__, e)
    client.log_artifacts(data.run_id, str(stage), ARTIFACT_DIR)


def report_after_sweep(parent_run_id: str, tracking_uri: str, echo=print) -> Path | None:
    """The report at the end of `fco-ray sweep`. The sweep's results are already in MLflow, so
    a failure here is a logged warning, never an error: rerun `fco-ray report` later. The
    report's warnings (e.g. a best configuration on the edge of the grid) are echoed."""
    try:
        index = render_report(parent_run_id, tracking_uri=tracking_uri)
    except Exception as e:  # noqa: BLE001 - see the docstring
        log.warning("sweep report failed (%s: %s); the runs are in MLflow, retry with "
                    "`fco-ray report %s --tracking-uri %s`", type(e).__name__, e, parent_run_id,
                    tracking_uri)
        return None
    echo(f"report: {index} (also attached to the parent run under {ARTIFACT_DIR}/)")
    for warning in json.loads((index.parent / "report.json").read_text()).get("warnings", []):
        echo(f"warning: {warning}")
    return index


__all__ = ["ARTIFACT_DIR", "DEFAULT_UI", "Curve", "Dashboard", "Heatmap", "available", "find_dashboard",
           "load_dashboard", "load_sweep", "render_report", "report_after_sweep", "run_url", "ui_base"]
