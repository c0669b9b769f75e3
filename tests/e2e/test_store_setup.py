"""Two processes setting up the same new MLflow SQLite store at once (two first sweeps, no
template store yet): both succeed (README "Reliability"). Without the setup lock one of them
died with alembic's "duplicate column name: step" in 3 of 3 tries."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

import fco_ray

REPO = Path(fco_ray.__file__).resolve().parents[1]

# imports, then waits until both processes are ready (a file each), then opens the store and
# creates an experiment in it: the two setups start within about a millisecond
OPEN = """
import sys, time
from pathlib import Path
from fco_ray.tracking.store import Store
db, me = Path(sys.argv[1]), sys.argv[2]
(db.parent / f"ready-{me}").touch()
while len(list(db.parent.glob("ready-*"))) < 2:
    time.sleep(0.001)
store = Store(f"sqlite:///{db}")
store.experiment_id("exp-" + me)
"""


@pytest.mark.slow  # 4 processes importing MLflow and migrating a store: 30-80 s on 2 cores
def test_two_processes_set_up_a_new_store_at_once(tmp_path):
    for attempt in range(2):
        db = tmp_path / f"try{attempt}" / "mlflow.db"
        db.parent.mkdir()
        # an empty cache each time: no template store to copy (fco_ray/tracking/template.py),
        # so both processes find a new store to set up with MLflow's migrations
        env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(db.parent / "cache")}
        procs = [subprocess.Popen([sys.executable, "-c", OPEN, str(db), str(i)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for i in range(2)]
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-2000:]
        names = {e.name for e in MlflowClient(f"sqlite:///{db}").search_experiments()}
        assert {"exp-0", "exp-1"} <= names


def test_a_local_sqlite_store_writes_ahead_and_a_network_one_is_left_alone(tmp_path, monkeypatch):
    """Store puts a local SQLite database in WAL mode (one sync per commit; readers do not
    block the writer), never one on a network file system (WAL needs shared memory)."""
    import sqlite3

    from fco_ray.tracking import store as tracking

    def mode(db):
        with sqlite3.connect(db) as connection:
            return connection.execute("pragma journal_mode").fetchone()[0]

    def synchronous(store):  # of a connection MLflow writes through (1 normal, 2 full)
        with store.client._tracking_client.store.engine.connect() as connection:
            return connection.exec_driver_sql("pragma synchronous").scalar()

    local = tracking.Store(f"sqlite:///{tmp_path / 'local.db'}")
    local.experiment_id("x")
    assert mode(tmp_path / "local.db") == "wal"
    assert synchronous(local) == 1  # a commit is not an fsync: the log is synced at checkpoints
    run = local.client.create_run(local.experiment_id("x")).info.run_id
    local.log_rows(run, [{"round": 0, "loss": 1.5}])
    assert [m.value for m in local.client.get_metric_history(run, "loss")] == [1.5]
    monkeypatch.setattr(tracking, "_filesystem", lambda path: "nfs4")
    shared = tracking.Store(f"sqlite:///{tmp_path / 'shared.db'}")
    shared.experiment_id("x")
    assert mode(tmp_path / "shared.db") == "delete"
    assert synchronous(shared) == 2  # SQLite's default: left alone without WAL
