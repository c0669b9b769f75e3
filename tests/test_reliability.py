"""Reliability, round three: inputs that lost data, were read with a wrong meaning, or made a
sweep wait without end. Each is refused with one line naming the file, line or key (exit 2)
before any work, or stops cleanly and stays resumable."""
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fco_ray.cli import main

from .test_bad_input import LASSO, RUN, SWEEP, changed

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path


def refused(capsys, argv, *fragments):
    """`fco-ray argv` exits 2 with one line holding every fragment; returns the line."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    return err


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


# --- data loss -------------------------------------------------------------------------------

@pytest.mark.parametrize("uri, fragment", [
    ("sqlite://", "in-memory SQLite database"), ("sqlite:///:memory:", "in-memory"),
    ("sqlite:///file:x?mode=memory&uri=true", "in-memory"),
    ("sqlite://relative.db", "needs three slashes (sqlite:///relative.db"),
    ("file:///tmp/mlruns", "MLflow 3 no longer opens file stores"),
    ("postgresql://u@127.0.0.1/db", "driver (Python module 'psycopg2') is not installed"),
    ("mysql+pymysql://u@127.0.0.1/db", "'pymysql'")])
def test_tracking_uri_that_keeps_nothing_is_refused(capsys, workdir, uri, fragment):
    driver = {"postgresql": "psycopg2", "mysql+pymysql": "pymysql"}.get(uri.split(":")[0])
    if driver and importlib.util.find_spec(driver) is not None:
        pytest.skip(f"{driver} is installed here")
    run = write(workdir / "run.yaml", {**RUN, "tracking": {"uri": uri}})
    refused(capsys, ["run", str(run)], f"{run}: tracking.uri: tracking URI", fragment)
    sweep = write(workdir / "sweep.yaml", {**SWEEP, "tracking": {"uri": uri}})
    refused(capsys, ["sweep", str(sweep)], fragment)
    for command in ("runs", "report"):
        refused(capsys, [command, "x", "--tracking-uri", uri], fragment)
    assert sorted(p.name for p in workdir.iterdir()) == ["run.yaml", "sweep.yaml"]  # nothing made


def _hold_lock(storage: Path, name: str) -> subprocess.Popen:
    """Another driver of sweep `name` (a process holding its lock until killed)."""
    code = ("import sys, time; from pathlib import Path; from fco_ray.sweep.storage import sweep_lock\n"
            f"with sweep_lock(Path({str(storage)!r}), {name!r}):\n"
            "    print('held', flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_sweep_of_the_same_name_is_refused_while_the_first_runs(capsys, workdir):
    storage = workdir / "ray_results"
    storage.mkdir()
    other = _hold_lock(storage, "bad")
    try:
        sweep = write(workdir / "bad.yaml", {**SWEEP, "tracking": {"uri": f"sqlite:///{workdir}/m.db"}})
        refused(capsys, ["sweep", str(sweep), "--storage", str(storage)],
                "sweep 'bad' is already running from this storage", f"process {other.pid}")
        assert sorted(p.name for p in storage.iterdir()) == [".bad.lock"]  # no Tune state
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
    # the holder was killed: its lock went with it; a new driver takes it and records itself
    from fco_ray.sweep.storage import sweep_lock

    with sweep_lock(storage, "bad"):
        assert (storage / ".bad.lock").read_text().split() == [str(os.getpid())]


def test_a_stale_lock_of_a_dead_driver_is_taken_over(workdir):
    """The lock is held by a process that outlived its driver (a child that inherited the
    descriptor), and the PID in the file is dead: stale, taken over."""
    from fco_ray.sweep.storage import sweep_lock

    storage = workdir / "ray_results"
    storage.mkdir()
    holder = _hold_lock(storage, "s")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (storage / ".s.lock").write_text(f"{dead.pid}\n")  # the driver that wrote it is gone
    try:
        with sweep_lock(storage, "s"):
            assert (storage / ".s.lock").read_text().split() == [str(os.getpid())]
    finally:
        holder.kill()
        holder.wait()


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()[:100]})")


def test_storage_without_room_is_refused_before_ray_starts(capsys, workdir):
    storage = workdir / "small"
    _mount_tmpfs(storage, "1m")
    try:
        sweep = write(workdir / "bad.yaml", {**SWEEP, "tracking": {"uri": f"sqlite:///{workdir}/m.db"}})
        refused(capsys, ["sweep", str(sweep), "--storage", str(storage)],
                f"--storage {storage}: only", "free; a sweep keeps at least 256.0 MiB free")
        assert list(storage.iterdir()) == []
    finally:
        subprocess.run(["umount", str(storage)], check=False)


@pytest.mark.ray
@pytest.mark.slow
def test_disk_filling_during_a_sweep_stops_it_resumable(workdir, monkeypatch):
    """Tune's storage is a real small tmpfs; a filler leaves the reserve (lowered to 1 MiB
    for the test) plus a little: the sweep's own writes cross it, the sweep stops with the
    --resume command, and once the filler is gone `--resume` finishes every trial, each
    child run's rounds logged once."""
    ray = pytest.importorskip("ray")
    from fco_ray.sweep import SweepInterrupted, run_sweep
    from fco_ray.sweep import storage as storage_module
    from fco_ray.tracking import Store, children, find_parent

    storage = workdir / "small"
    _mount_tmpfs(storage, "8m")
    monkeypatch.setattr(storage_module, "RESERVE_BYTES", 2**20)
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    try:
        filler = storage / "filler"
        free = storage_module.free_bytes(storage)
        filler.write_bytes(b"\0" * (free - 2**20 - 96 * 2**10))  # 96 KiB above the reserve
        sweep = write(workdir / "full.yaml", changed(
            {**SWEEP, "tracking": {"uri": f"sqlite:///{workdir}/m.db"}},
            {"name": "full", "search.grid": {"algorithm.client_lr": [0.001, 0.002, 0.004]},
             "tune": {"metric": "f1", "mode": "max", "fuse": False, "max_concurrent": 1},
             "rounds": 20}))
        with pytest.raises(SweepInterrupted, match=r"only .* free .* once space is freed, finish "
                                                   r"it with: fco-ray sweep .*full.yaml --resume"):
            run_sweep(sweep, storage=storage, echo=lambda line: None)
        filler.unlink()  # space freed
        outcome = run_sweep(sweep, resume=True, storage=storage, echo=lambda line: None)
        assert outcome.ok
        store = Store(outcome.tracking_uri)
        runs = children(store, find_parent(store, outcome.experiment_id, "full"))
        assert len(runs) == 6  # 2 algorithms x 3 rates, each once
        for run in runs:
            assert run.info.status == "FINISHED" and run.data.tags["fco.status"] == "finished"
            steps = [m.step for m in store.client.get_metric_history(run.info.run_id, "f1")]
            assert steps == [0, 5, 10, 15, 20]
    finally:
        ray.shutdown()
        subprocess.run(["umount", str(storage)], check=False)
