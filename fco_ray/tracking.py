"""MLflow logging: single runs, and one parent run per sweep with one child run per trial.

Layout (docs/configuration.md; the sweep writes it, `fco-ray runs` and reports read it):
- parent run: tags `fco.role=sweep`, `fco.sweep=<name>`, `fco.metric`, `fco.mode`; artifact
  `sweep.yaml`; at the end `fco.best.<algorithm>` (JSON config) and `best.<algorithm>.<metric>`;
- child run per trial: tags `mlflow.parentRunId`, `fco.role=trial`, `fco.sweep`,
  `fco.trial_id`, `fco.algorithm`, `fco.status` (running, finished, diverged, stopped, error),
  `fco.retries` (reruns after the trial's process failed, if any);
  params = the trial's run config flattened to dotted keys; metrics with `step = round`;
  when it ends, two summary metrics of the ranked metric only: `best.<metric>` (its best
  value over the rounds) and `mean.<metric>` (its mean over the evaluated rounds, the
  tie-break of `best_per_algorithm`); a metric's final value is MLflow's own latest value of
  its series (the runs table's column, `metrics.<metric>` in a search), so no `final.*` copy
  is logged; run name e.g. `feddualavg lr=0.01 slr=1 seed0`. Few summaries because MLflow's
  chart view draws each logged key as a chart in alphabetical order: one-point summaries of
  every metric (14 of 22 keys on E1) came before the per-round curves (docs/sweeps.md).
- experiments fco-ray creates carry the tag `mlflow.experimentKind=custom_model_development`:
  MLflow 3's UI then opens them in its model-training view (runs table, charts), not GenAI.

Everything here runs in one process (the CLI or the Tune driver): SQLite stores must not be
written by many processes at once.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterable
from urllib.parse import quote

import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from .runtime.errors import ConfigError

ROLE, SWEEP, TRIAL_ID, ALGORITHM, STATUS = "fco.role", "fco.sweep", "fco.trial_id", "fco.algorithm", "fco.status"
PARENT = "mlflow.parentRunId"
FINAL_ROUND = "fco.final_round"
RETRIES = "fco.retries"  # reruns of a trial after its process failed
MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limits: entries in all, params, tags
MAX_PARAMS_PER_BATCH = MAX_TAGS_PER_BATCH = 100
# MLflow 3's UI picks the experiment's view from this tag (its JS: ExperimentKind); without
# it an experiment of runs with no traces may be shown as a GenAI one
EXPERIMENT_KIND, TRAINING_KIND = "mlflow.experimentKind", "custom_model_development"
SUMMARY_PREFIXES = ("final.", "best.", "mean.")
SHORT_NAMES = {"algorithm.client_lr": "lr", "algorithm.server_lr": "slr"}
# metric directions by name (substring): what "best" means for a metric that is not the
# sweep's ranked one; metrics matching neither (density, rank, floats_up) get no best.*
HIGHER_IS_BETTER = ("f1", "precision", "recall", "accuracy")
LOWER_IS_BETTER = ("loss", "mse", "gap", "error", "suboptimality")


def default_uri() -> str:
    """`MLFLOW_TRACKING_URI` if set, else the SQLite file `mlflow.db` in the working directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"


class TrackingUnavailable(RuntimeError):
    """The MLflow tracking store cannot be reached or opened (the CLI exits with code 1)."""


def check_store(uri: str, timeout: float = 10.0) -> None:
    """Raise TrackingUnavailable, within about `timeout` seconds, if the store at `uri`
    cannot be used; call it before any work starts. MLflow itself retries an unreachable
    server or an unopenable database with backoff for minutes before it gives up.

    `http(s)://`: the server must answer (any HTTP status below 500; credentials are
    MLflow's business). `sqlite:///PATH`: PATH must open as an SQLite database (its
    directory is created, as MLflow would). Other stores are left to MLflow.
    """
    from .runtime.files import check_tracking_uri

    try:
        check_tracking_uri(uri)  # a bare word would become a file store directory
    except ValueError as e:
        source = " (MLFLOW_TRACKING_URI)" if uri == os.environ.get("MLFLOW_TRACKING_URI") else ""
        raise ConfigError(f"{e}{source}") from None
    elsewhere = "or point tracking.uri (or MLFLOW_TRACKING_URI) at a store that works"
    if uri.startswith(("http://", "https://")):
        try:
            urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout).close()
        except urllib.error.HTTPError as e:
            if e.code >= 500:
                raise TrackingUnavailable(f"MLflow tracking server {uri} answers HTTP {e.code}; "
                                          f"fix the server, {elsewhere}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise TrackingUnavailable(f"MLflow tracking server {uri} is not reachable ({reason}); "
                                      f"start the server, {elsewhere}") from None
    elif uri.startswith("sqlite:///"):
        from .runtime.files import check_sqlite_store

        db = Path(uri[len("sqlite:///"):])
        check_sqlite_store(db, write=True)
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.closing(sqlite3.connect(db, timeout=timeout)) as connection:
                connection.execute("select count(*) from sqlite_master").fetchone()
        except (OSError, sqlite3.Error) as e:
            raise TrackingUnavailable(f"MLflow tracking database {db} cannot be opened ({e}); "
                                      f"fix the path, {elsewhere}") from None


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


def direction(metric: str, ranked: str | None = None, mode: str | None = None) -> str | None:
    """"max", "min" or None (no natural best) for `metric`; the ranked metric has `mode`."""
    if metric == ranked and mode in ("min", "max"):
        return mode
    if any(word in metric for word in HIGHER_IS_BETTER):
        return "max"
    if any(word in metric for word in LOWER_IS_BETTER):
        return "min"
    return None


class Summary:
    """The summaries of one run, from its rows: `final` (each metric's last finite value),
    `best` (min or max over the rounds, by `direction`) and, for the ranked metric, its mean
    over the evaluated rounds, the area under its curve, which breaks ties of the final value
    in favour of the configuration that got there sooner (`best_per_algorithm`). Only the
    ranked metric's `best.<m>` and `mean.<m>` are logged (`metrics`): see the module
    docstring for why."""

    def __init__(self, ranked: str | None = None, mode: str | None = None):
        self.ranked, self.mode = ranked, mode
        self.final: dict[str, float] = {}
        self.best: dict[str, float] = {}
        self.total: dict[str, list[float]] = {}  # the ranked metric: [sum, count]

    def add(self, row: dict) -> None:
        for k, v in row.items():
            if k == "round" or not _finite(v):
                continue
            v = float(v)
            self.final[k] = v
            if k == self.ranked:
                total = self.total.setdefault(k, [0.0, 0])
                total[0], total[1] = total[0] + v, total[1] + 1
            way = direction(k, self.ranked, self.mode)
            if way is not None and (k not in self.best or (v > self.best[k] if way == "max" else v < self.best[k])):
                self.best[k] = v

    def metrics(self) -> dict[str, float]:
        """What is logged: `best.<ranked>` and `mean.<ranked>` (none without a ranked metric)."""
        return {**{f"best.{k}": v for k, v in self.best.items() if k == self.ranked},
                **{f"mean.{k}": total / count for k, (total, count) in self.total.items()}}


def run_label(config: dict, keys: Iterable[str] = ("algorithm.client_lr", "algorithm.server_lr")) -> str:
    """A run's name in the MLflow UI: algorithm, the values of `keys` (dotted config keys;
    client_lr as `lr`, server_lr as `slr`) and the seed, e.g. `feddualavg lr=0.01 slr=1 seed0`."""
    flat = flatten(config)
    parts = [str(flat.get("algorithm.name", "?"))]
    for key in keys:
        if key in flat and flat[key] is not None and key not in ("algorithm.name", "seed"):
            value = flat[key]
            text = f"{value:.3g}" if isinstance(value, float) else str(value)
            parts.append(f"{SHORT_NAMES.get(key, key.split('.')[-1])}={text}")
    return " ".join(parts + [f"seed{flat.get('seed', 0)}"])


def flatten(tree: dict, prefix: str = "") -> dict:
    """{"algorithm": {"client_lr": 0.1}} -> {"algorithm.client_lr": 0.1} (lists stay values)."""
    out = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def param_text(value) -> str:
    """Param values as MLflow strings; JSON for non-strings so `param_value` can read them back."""
    return value if isinstance(value, str) else json.dumps(value)


def param_value(text: str):
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


def filter_tags(**tags: str) -> str:
    """An MLflow search filter matching every tag (keys contain dots, hence the backticks)."""
    return " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())


def _metrics(rows: list[dict], times: list[int]) -> list[Metric]:
    """MLflow metrics of rows (`round` + metrics, step = round); non-numbers are skipped."""
    return [Metric(k, float(v), t, int(row["round"])) for row, t in zip(rows, times)
            for k, v in row.items() if k != "round" and _finite(v)]


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@contextlib.contextmanager
def _setup_lock(uri: str, timeout: float = 300.0):
    """Serialize MLflow's first-time setup of an SQLite store across processes.

    Opening a new database runs MLflow's migrations; two processes doing it at once (two
    first sweeps) both see an empty database and one dies ("duplicate column name").
    A lock file next to the database makes the second wait until the first is done (then
    it finds the tables and skips the setup). Other stores set themselves up server-side.
    """
    if not uri.startswith("sqlite:///"):
        yield
        return
    from filelock import FileLock, Timeout

    db = Path(uri[len("sqlite:///"):])
    lock = FileLock(f"{db}.lock", timeout=timeout)
    try:
        lock.acquire()
    except Timeout:  # (a subclass of OSError)
        raise TrackingUnavailable(f"MLflow tracking database {db}: another process has been "
                                  f"setting it up for {timeout:.0f} s ({db}.lock)") from None
    except OSError:  # a read-only directory: no lock possible, and no setup either
        yield
        return
    try:
        yield
    finally:
        lock.release()


#: File systems where SQLite's write-ahead log must not be used (it needs shared memory
#: between the processes that open the database: https://sqlite.org/wal.html).
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "lustre", "gpfs", "ceph",
                       "fuse.sshfs", "9p", "beegfs", "glusterfs", "fuse.glusterfs")


def write_ahead_log(db: Path) -> bool:
    """Put a local SQLite store in WAL mode (persistent in the file; MLflow's connections and
    `mlflow ui` then use it too): a sweep's driver commits once per child-run write, and a
    commit costs one sync of the log instead of the rollback journal's several (MLflow's
    writes 1.9x faster here by the medians, benchmarks/results/mlflow_sqlite.md); readers such as the UI
    no longer block the writer. Left as it is on a network file system, or if the database
    cannot be changed (read-only: the caller only reads). Returns whether the store is in WAL
    mode."""
    if _filesystem(db) in NETWORK_FILESYSTEMS:
        return False
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as connection:
            if connection.execute("pragma journal_mode").fetchone()[0] != "wal":
                connection.execute("pragma journal_mode=wal")
            return connection.execute("pragma journal_mode").fetchone()[0] == "wal"
    except sqlite3.Error:
        return False


def _sync_at_checkpoints(dbapi_connection, connection_record) -> None:
    """SQLite's `synchronous=NORMAL` on a connection of a WAL-mode store: a commit is no
    longer an fsync of the log (the log is synced at its checkpoints). A killed process
    loses nothing that was committed; a power cut may lose the last commits but never
    corrupts the database (SQLite's documented guarantee for WAL mode)."""
    dbapi_connection.execute("pragma synchronous=normal")


def _sync_mlflow_at_checkpoints(client: MlflowClient) -> None:
    """Apply `_sync_at_checkpoints` to the connections of MLflow's SQLAlchemy engine for
    this store (a sweep's driver writes ~3 commits per child run: each fsync cost more than
    the write; benchmarks/results/mlflow_sweep_log.md). MLflow does not expose its engine
    publicly: if a future MLflow moves it, writes just stay synchronous."""
    from sqlalchemy import event

    engine = getattr(getattr(getattr(client, "_tracking_client", None), "store", None), "engine", None)
    if engine is None or event.contains(engine, "connect", _sync_at_checkpoints):
        return
    event.listen(engine, "connect", _sync_at_checkpoints)
    engine.dispose()  # connections opened before (MLflow's setup) are reopened with it


def _filesystem(path: Path) -> str:
    """The type of the file system holding `path` (Linux /proc/self/mounts; "" elsewhere)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    path, best, kind = str(path.resolve()), "", ""
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3:
            point = parts[1].replace("\\040", " ")
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, kind = point, parts[2]
    return kind


class Store:
    """A tracking store: an `MlflowClient` plus the few queries the platform needs."""

    def __init__(self, uri: str | None = None):
        self.uri = uri or default_uri()
        with _setup_lock(self.uri):
            self.client = MlflowClient(tracking_uri=self.uri)  # creates the tables if new
            if self.uri.startswith("sqlite:///") and write_ahead_log(Path(self.uri[len("sqlite:///"):])):
                _sync_mlflow_at_checkpoints(self.client)

    def experiment_id(self, name: str, create: bool = True) -> str | None:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if create and EXPERIMENT_KIND not in exp.tags:  # made by an older fco-ray
                self.client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND, TRAINING_KIND)
            return exp.experiment_id
        if not create:
            return None
        location = None
        if self.uri.startswith("sqlite:///"):
            # artifacts next to the database, not in whatever directory the process runs in
            # (a `ray job` runs in a temporary copy of the working dir)
            db = Path(self.uri[len("sqlite:///"):]).resolve()
            location = (db.parent / "mlartifacts").as_uri()
        return self.client.create_experiment(name, artifact_location=location,
                                             tags={EXPERIMENT_KIND: TRAINING_KIND})

    def search(self, experiment_id: str, filter_string: str, order_by: list[str] | None = None) -> list:
        runs, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], filter_string, order_by=order_by,
                                           page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def log_rows(self, run_id: str, rows: Iterable[dict], times: Iterable[int] | None = None,
                 params: dict | None = None, tags: dict | None = None) -> None:
        """Log metric rows (`round` + metrics) with step = round; non-numbers are skipped.
        `times`: each row's timestamp in ms (default: now). `params` (a config, flattened to
        dotted keys) and `tags` go in the same writes: one `log_batch` unless MLflow's
        limits (1000 entries, of which 100 params and 100 tags) need more."""
        rows = list(rows)
        times = list(times) if times is not None else [int(time.time() * 1000)] * len(rows)
        metrics = _metrics(rows, times)
        params = [Param(k, param_text(v)) for k, v in flatten(params or {}).items()]
        tags = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        while metrics or params or tags:
            p, t = params[:MAX_PARAMS_PER_BATCH], tags[:MAX_TAGS_PER_BATCH]
            m = metrics[:MAX_METRICS_PER_BATCH - len(p) - len(t)]
            self.client.log_batch(run_id, metrics=m, params=p, tags=t)
            metrics, params, tags = metrics[len(m):], params[len(p):], tags[len(t):]

    def log_config(self, run_id: str, config: dict) -> None:
        self.log_rows(run_id, [], params=config)

    def set_tags(self, run_id: str, tags: dict) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def last_step(self, run_id: str, metric: str) -> int:
        """The last round logged for `metric` (-1 if none): a rerun trial resumes after it."""
        return max((m.step for m in self.client.get_metric_history(run_id, metric)), default=-1)


def start_single_run(store: Store, config: dict, run_name: str) -> str:
    """An MLflow run for one `fco-ray run` (no Tune); `config` is the validated run config."""
    exp = store.experiment_id(config["tracking"]["experiment"])
    run = store.client.create_run(exp, run_name=run_name, tags={
        ROLE: "run", ALGORITHM: config["algorithm"]["name"], STATUS: "running"})
    store.log_config(run.info.run_id, {k: v for k, v in config.items() if k != "tracking"})
    return run.info.run_id


def close_run(store: Store, run_id: str, status: str, final_round: int,
              summary: Summary | None = None, rows: Iterable[dict] = (),
              times: Iterable[int] | None = None, params: dict | None = None) -> None:
    """End a run with its fco.status (finished, diverged, stopped, error), final round and
    summary metrics (`final.*`, `best.*`, logged at step = the final round); metric `rows`
    and `params` not yet written go in the same write (one `log_batch`, then the end)."""
    rows, now = list(rows), int(time.time() * 1000)
    times = list(times) if times is not None else [now] * len(rows)
    if summary is not None and summary.metrics():
        rows, times = rows + [{"round": final_round, **summary.metrics()}], times + [now]
    store.log_rows(run_id, rows, times, params=params,
                   tags={STATUS: status, FINAL_ROUND: final_round})
    store.client.set_terminated(run_id, "FAILED" if status == "error" else "FINISHED")


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


class SweepLog:
    """The MLflow side of one sweep: its parent run and one child run per Tune trial id.

    Child runs are keyed by trial id, so a resumed sweep reuses them: a trial whose run is
    FINISHED is not logged again, and a trial that is rerun from scratch continues its run
    after the last round already logged (same seed, same rows), never making a second run.
    Writes are few because a store's cost is per write (an SQLite transaction, a REST call),
    not per value: a child run is created with its tags; its params and metric rows are
    buffered and go in one batch every `FLUSH_ROWS` rows or `FLUSH_SECONDS`, and the last
    batch goes with its end (status, summary metrics): ~3 writes for a short trial.
    """

    FLUSH_ROWS, FLUSH_SECONDS = 20, 5.0

    def __init__(self, store: Store, experiment: str, name: str, metric: str, mode: str,
                 sweep_text: str, resume: bool):
        self.store, self.name, self.metric, self.mode = store, name, metric, mode
        self.experiment_id = store.experiment_id(experiment)
        parent = find_parent(store, self.experiment_id, name) if resume else None
        if parent is None:
            parent = store.client.create_run(self.experiment_id, run_name=name, tags={
                ROLE: "sweep", SWEEP: name, "fco.metric": metric, "fco.mode": mode})
            store.client.log_text(parent.info.run_id, sweep_text, "sweep.yaml")
            self.runs = {}
        else:
            store.client.update_run(parent.info.run_id, status="RUNNING")
            self.runs = {r.data.tags[TRIAL_ID]: r for r in children(store, parent)}
        self.parent_id = parent.info.run_id
        self._open: dict[str, dict] = {}  # trial id -> {run_id, last_step, rows, times, flushed}
        self._closed: dict[str, str] = {}  # trial id -> run id, of runs ended by this sweep

    def finished(self) -> dict[str, dict]:
        """Trial id -> (status, final round, final metrics) of trials whose run is FINISHED."""
        return {tid: {"status": r.data.tags.get(STATUS), "metrics": dict(r.data.metrics),
                      "round": param_value(r.data.tags.get(FINAL_ROUND, "0"))}
                for tid, r in self.runs.items() if r.info.status == "FINISHED"}

    def start(self, trial_id: str, config: dict, run_name: str) -> None:
        """Open (or reopen) the trial's child run; a FINISHED run stays closed, and an open
        one (a trial rerun by Tune after a failure, see `retry`) stays as it is."""
        if trial_id in self._open or trial_id in self._closed:
            return
        run = self.runs.get(trial_id)
        if run is not None and run.info.status == "FINISHED":
            return
        if run is None:
            run = self.store.client.create_run(self.experiment_id, run_name=run_name, tags={
                PARENT: self.parent_id, ROLE: "trial", SWEEP: self.name, TRIAL_ID: trial_id,
                ALGORITHM: config["algorithm"]["name"], STATUS: "running"})
            self.runs[trial_id] = run
            last = -1
        else:  # interrupted or errored before: rerun from scratch, continue the same run
            self.store.client.update_run(run.info.run_id, status="RUNNING")
            self.store.set_tags(run.info.run_id, {STATUS: "running"})
            last = self.store.last_step(run.info.run_id, self.metric)
        # the params go with the first batch (again after a restart: the same values)
        self._open[trial_id] = {"run_id": run.info.run_id, "last_step": last, "rows": [],
                                "times": [], "flushed": time.monotonic(),
                                "params": {k: v for k, v in config.items() if k != "tracking"},
                                "summary": Summary(self.metric, self.mode)}

    def add_row(self, trial_id: str, row: dict) -> None:
        trial = self._open.get(trial_id)
        if trial is None:
            return  # a closed run
        if row["round"] == 0:  # a (re)run starts over: same seed, same rows, summarized again
            trial["summary"] = Summary(self.metric, self.mode)
        trial["summary"].add(row)
        if row["round"] <= trial["last_step"]:
            return  # a round logged before an interruption
        trial["rows"].append(row)
        trial["times"].append(int(time.time() * 1000))
        trial["last_step"] = row["round"]
        if (len(trial["rows"]) >= self.FLUSH_ROWS
                or time.monotonic() - trial["flushed"] > self.FLUSH_SECONDS):
            self._flush(trial)

    def retry(self, trial_id: str) -> None:
        """The trial failed and is rerun from round 0: write the rows it logged so far and
        count the attempt (tag `fco.retries`); its rerun continues after the last row."""
        trial = self._open.get(trial_id)
        if trial is None:
            return
        self._flush(trial)
        trial["retries"] = trial.get("retries", 0) + 1
        self.store.set_tags(trial["run_id"], {RETRIES: trial["retries"]})

    def _flush(self, trial: dict) -> None:
        if trial["rows"] or trial["params"]:  # kept for the next try if the write fails
            self.store.log_rows(trial["run_id"], trial["rows"], trial["times"], params=trial["params"])
        trial["rows"], trial["times"], trial["params"] = [], [], None
        trial["flushed"] = time.monotonic()

    def end(self, trial_id: str, status: str) -> None:
        """Close the trial's run: status finished | diverged | stopped | error."""
        trial = self._open.get(trial_id)
        if trial is None:
            return
        close_run(self.store, trial["run_id"], status, max(trial["last_step"], 0), trial["summary"],
                  trial["rows"], trial["times"], trial["params"])
        del self._open[trial_id]
        self._closed[trial_id] = trial["run_id"]

    def log_artifacts(self, trial_id: str, folder: str | Path) -> None:
        """Attach the files in `folder` (e.g. `model.npz`) to the trial's run, open or ended."""
        run = self._open.get(trial_id, {}).get("run_id") or self._closed.get(trial_id) or (
            self.runs[trial_id].info.run_id if trial_id in self.runs else None)
        if run is not None:
            self.store.client.log_artifacts(run, str(folder))

    def finish(self, failed: bool) -> pd.DataFrame:
        """Write the best configuration per algorithm on the parent run and close it."""
        parent = self.store.client.get_run(self.parent_id)
        best = best_per_algorithm(trials_frame(children(self.store, parent)), self.metric, self.mode)
        for row in best.to_dict("records"):
            alg = row["algorithm"]
            config = {**{k: row[k] for k in best.attrs["params"]}, "seeds": row["seeds"]}
            self.store.set_tags(self.parent_id, {f"fco.best.{alg}": json.dumps(config),
                                                 f"fco.best.{alg}.run_ids": json.dumps(row["run_ids"])})
            self.store.log_rows(self.parent_id, [
                {"round": 0, **{f"best.{alg}.{m}": row[m] for m in best.attrs["metrics"]}}])
        self.store.client.set_terminated(self.parent_id, "FAILED" if failed else "FINISHED")
        return best


class RunLog:
    """One configuration logged as one MLflow run, the way `fco-ray run` logs it: params =
    the config, a metric per column at step = round as the rows come, `fco.status`, the
    `final.*` / `best.*` summaries, and the final model (E6: also its attack) as artifacts.
    The store is checked before the run is created (`check_store`)."""

    def __init__(self, cfg, uri: str | None = None):
        uri = uri or cfg.tracking.uri or default_uri()
        check_store(uri)
        self.cfg, self.store, self.summary = cfg, Store(uri), Summary()
        config = cfg.model_dump(mode="json")
        self.run_id = start_single_run(self.store, config, f"{run_label(config)} {cfg.problem.name}")

    def add(self, row: dict) -> None:
        self.store.log_rows(self.run_id, [row])
        self.summary.add(row)

    def fail(self) -> None:
        close_run(self.store, self.run_id, "error", 0)

    def close(self, status: str, final_round: int, model: dict | None) -> None:
        if model is not None:  # the final model (and E6's attack image) as run artifacts
            import tempfile

            from .artifacts import trial_artifacts

            with tempfile.TemporaryDirectory() as tmp:
                trial_artifacts(self.cfg, model, Path(tmp))
                self.store.client.log_artifacts(self.run_id, tmp)
        close_run(self.store, self.run_id, status, final_round, self.summary)

    def url(self) -> str:
        """The run's page in the MLflow UI."""
        experiment = self.store.experiment_id(self.cfg.tracking.experiment, create=False)
        return run_url(ui_base(self.store.uri), experiment, self.run_id)
