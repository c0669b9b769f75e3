"""The MLflow store: the tracking URI, its checks before any work, the SQLite
settings, and `Store` (experiments, searches, batched writes)."""
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

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from ..runtime.errors import ConfigError
from .template import is_new, keep_as_template, start_from_template

ROLE, SWEEP, TRIAL_ID, ALGORITHM, STATUS = "fco.role", "fco.sweep", "fco.trial_id", "fco.algorithm", "fco.status"


PARENT = "mlflow.parentRunId"


FINAL_ROUND = "fco.final_round"


RETRIES = "fco.retries"  # reruns of a trial after its process failed


RANK = "fco.rank"  # a child run's place in its sweep's ranking, zero-padded: sorts as text


MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limits: entries in all, params, tags


MAX_PARAMS_PER_BATCH = MAX_TAGS_PER_BATCH = 100


# MLflow 3's UI picks the experiment's view from this tag (its JS: ExperimentKind); without
# it an experiment of runs with no traces may be shown as a GenAI one
EXPERIMENT_KIND, TRAINING_KIND = "mlflow.experimentKind", "custom_model_development"


def default_uri() -> str:
    """`MLFLOW_TRACKING_URI` if set, else the SQLite file `mlflow.db` in the working directory."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    try:
        return f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"
    except FileNotFoundError:
        raise ConfigError("the working directory no longer exists (it was deleted or moved), and "
                          "the default MLflow store is mlflow.db in it: change to an existing "
                          "directory, or give a tracking URI") from None


class TrackingUnavailable(RuntimeError):
    """The MLflow tracking store cannot be reached or opened (the CLI exits with code 1)."""


#: how long `check_store` waits for a store to answer (a locked database, a silent server)
STORE_WAIT_S = 10.0


def check_store(uri: str, timeout: float | None = None) -> None:
    """Raise TrackingUnavailable, within about `timeout` seconds (default `STORE_WAIT_S`), if
    the store at `uri` cannot be used; call it before any work starts. MLflow itself retries
    an unreachable server or an unopenable database with backoff for minutes before it gives
    up.

    `http(s)://`: the server must answer (any HTTP status below 500; credentials are
    MLflow's business). `sqlite:///PATH`: PATH must open as an SQLite database (its
    directory is created, as MLflow would). Other stores are left to MLflow.
    """
    from ..runtime.files import check_tracking_uri

    timeout = STORE_WAIT_S if timeout is None else timeout
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
        from ..runtime.files import check_sqlite_store

        db = Path(uri[len("sqlite:///"):])
        check_sqlite_store(db, write=True)
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.closing(sqlite3.connect(db, timeout=timeout)) as connection:
                connection.execute("select count(*) from sqlite_master").fetchone()
                # a write lock, released at once: another process holding the database's
                # exclusive lock would make every MLflow write fail after 30 s of retries
                connection.execute("begin immediate")
                connection.rollback()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e):
                raise TrackingUnavailable(f"MLflow tracking database {db} cannot be opened ({e}); "
                                          f"fix the path, {elsewhere}") from None
            raise TrackingUnavailable(
                f"MLflow tracking database {db} is locked by another process (no write got "
                f"through within {timeout:g} s): a program holds it in a transaction (an open "
                f"sqlite3 shell or database browser, a stuck process: `fuser {db}` names it); "
                f"end that program and run again, {elsewhere}") from None
        except (OSError, sqlite3.Error) as e:
            raise TrackingUnavailable(f"MLflow tracking database {db} cannot be opened ({e}); "
                                      f"fix the path, {elsewhere}") from None


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
        db = Path(self.uri[len("sqlite:///"):]) if self.uri.startswith("sqlite:///") else None
        with _setup_lock(self.uri):
            # a new SQLite store starts as a copy of one MLflow set up before (its migrations
            # saved: fco_ray.tracking.template); the first becomes that template
            new = db is not None and not start_from_template(db) and is_new(db)
            self.client = MlflowClient(tracking_uri=self.uri)  # creates the tables if new
            if new and not is_new(db):
                keep_as_template(db)
            if db is not None and write_ahead_log(db):
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
