"""Two processes setting up the same new MLflow SQLite store at once (two first sweeps):
both succeed (README "Reliability"). Without the setup lock one of them dies with alembic's
"duplicate column name" in nearly every try."""
import os
import subprocess
import sys
import time
from pathlib import Path

import fco_ray

REPO = Path(fco_ray.__file__).resolve().parents[1]

# waits for a common start time, then opens the store and creates an experiment in it
OPEN = """
import sys, time
from fco_ray.tracking import Store
start = float(sys.argv[2])
ready = time.time()
time.sleep(max(start - ready, 0))
store = Store("sqlite:///" + sys.argv[1])
store.experiment_id("exp-" + sys.argv[3])
print(ready)
"""


def test_two_processes_set_up_a_new_store_at_once(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for attempt in range(2):
        db = tmp_path / f"try{attempt}" / "mlflow.db"
        db.parent.mkdir()
        start = time.time() + 15  # both have imported MLflow by then, even on a loaded machine
        procs = [subprocess.Popen([sys.executable, "-c", OPEN, str(db), str(start), str(i)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for i in range(2)]
        results = [p.communicate(timeout=300) for p in procs]
        for proc, (out, err) in zip(procs, results):
            assert proc.returncode == 0, err[-2000:]
            assert float(out) < start  # imports done in time: both opened the store together
        from mlflow import MlflowClient

        names = {e.name for e in MlflowClient(f"sqlite:///{db}").search_experiments()}
        assert {"exp-0", "exp-1"} <= names
