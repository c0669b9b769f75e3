"""Reliability and security, round four: a linked report folder that wrote elsewhere, the API's
missing bounds, names no store can find again, a reading command that wrote a store, SIGTERM,
locked and newer stores, sizes declared inside data files, and unclear messages. Each case
fails on the code before its fix."""
import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
import yaml

from fco_ray import ConfigError
from fco_ray.cli import main

from tests.e2e.test_bad_input import RUN, SWEEP
from tests.e2e.test_reliability import refused, write
from tests.e2e.test_report import make_sweep


# --- 1. reports never write through a link -----------------------------------------------------

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    _, pid, _ = make_sweep(uri, root / "mlartifacts", client_lrs=[0.01], server_lrs=[1.0])
    return {"uri": uri, "pid": pid}


@pytest.fixture
def elsewhere(tmp_path):
    """A folder outside the working directory holding a report of sweep `toy` of its own:
    nothing in it may change."""
    folder = tmp_path / "elsewhere"
    (folder / "toy").mkdir(parents=True)
    for name in ("index.html", "best.csv"):
        (folder / "toy" / name).write_text(f"their {name}")
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    yield folder
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("how", ["report", "out_through_link", "out_is_link", "after_sweep"])
def test_a_linked_report_root_is_refused(store, elsewhere, tmp_path, monkeypatch, capsys, how):
    cwd = tmp_path / "clone"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    if how == "out_is_link":
        os.symlink(elsewhere / "toy", cwd / "mine")
    else:
        os.symlink(elsewhere, cwd / "reports")  # as a cloned repository may ship it
    if how == "after_sweep":  # the sweep's own report step: a warning, the sweep's rows are kept
        assert report_after_sweep_quietly(store) is None
    else:
        out = {"report": [], "out_through_link": ["--out", "reports/toy"],
               "out_is_link": ["--out", "mine"]}[how]
        err = refused(capsys, ["report", "toy", "--tracking-uri", store["uri"], *out],
                      "is a symbolic link to", str(elsewhere), "--out ")
        assert "refusing to write through it" in err
    assert not (elsewhere / "toy" / "report.json").exists()


def report_after_sweep_quietly(store):
    from fco_ray.report import report_after_sweep

    return report_after_sweep(store["pid"], store["uri"], echo=lambda line: None)


@pytest.mark.parametrize("default_folder", [True, False])
def test_a_planted_hard_link_is_replaced_not_written_into(store, tmp_path, monkeypatch, default_folder):
    from fco_ray.report import render_report

    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "precious.csv"
    victim.write_text("keep me")
    out = tmp_path / "reports" / "toy"
    out.mkdir(parents=True)
    os.link(victim, out / "best.csv")  # the same file under two names
    os.link(victim, out / "index.html")
    render_report("toy", tracking_uri=store["uri"], out_dir=None if default_folder else out)
    assert victim.read_text() == "keep me" and victim.stat().st_nlink == 1
    assert (out / "best.csv").read_text().startswith("algorithm")
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


# --- 2. the API has the bounds and types of a sweep file ----------------------------------------

def test_run_grid_is_bounded_before_anything_is_expanded():
    from fco_ray import run_grid

    values = [float(v) for v in np.linspace(0.001, 1.0, 1000)]
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"grid expands to 1,000,000 configurations .* at most 20,000"):
        run_grid(RUN, {"algorithm.client_lr": values, "algorithm.server_lr": values})
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("values", [[0.01, 0.01], [0.01, np.float64(0.01)], [0.01, "0.01"]])
def test_run_grid_refuses_repeated_values(values):
    from fco_ray import run_grid

    with pytest.raises(ConfigError, match=r"grid 'algorithm.client_lr' lists 0.01 and .*the same value twice"):
        run_grid(RUN, {"algorithm.client_lr": values})


@pytest.mark.parametrize("key, value", [("rounds", np.bool_(True)), ("algorithm.client_lr", np.bool_(True)),
                                        ("seed", np.bool_(False))])
def test_numpy_booleans_are_refused_as_booleans(key, value):
    from fco_ray.api import resolve

    config = json.loads(json.dumps(RUN))
    *parents, last = key.split(".")
    node = config
    for part in parents:
        node = node[part]
    node[last] = value
    with pytest.raises(ConfigError, match=rf"{key}: expected a number, got the boolean {bool(value)}"):
        resolve(config)


def test_numpy_numbers_are_the_numbers_they_hold():
    from fco_ray.api import resolve
    from fco_ray.core.grid import expand

    cfg = resolve({**RUN, "seed": np.uint64(2**40), "rounds": np.int32(7),
                   "algorithm": {**RUN["algorithm"], "client_lr": np.float32(0.5)}})
    assert (cfg.seed, cfg.rounds, cfg.algorithm.client_lr) == (2**40, 7, 0.5)
    with pytest.raises(ConfigError, match=r"^seed: Input should be less than 9223372036854775808 "
                                          r"\(got 9223372036854775813\)$"):  # was "Unable to parse"
        resolve({**RUN, "seed": np.uint64(2**63 + 5)})
    points = expand(RUN, {"algorithm.client_lr": np.array([0.01, 0.02]), "seed": [np.int64(3)]})
    assert [(p["algorithm.client_lr"], c.seed) for p, c in points] == [(0.01, 3), (0.02, 3)]


def test_a_bad_grid_key_is_named_as_a_grid_key():
    from fco_ray import run_grid

    with pytest.raises(ConfigError, match=r"^grid key 'algorithm..client_lr': a key path") as e:
        run_grid(RUN, {"algorithm..client_lr": [0.01]})
    assert "--set" not in str(e.value)
    with pytest.raises(ConfigError, match=r"^grid key rounds.x: 'rounds' is not a mapping"):
        run_grid(RUN, {"rounds.x": [1]})


# --- 3. names ------------------------------------------------------------------------------------

def test_experiment_names_with_control_characters_are_refused(capsys, workdir):
    run = write(workdir / "run.yaml", {**RUN, "tracking": {"experiment": "e\x00x"}})
    refused(capsys, ["run", str(run), "--no-mlflow"], "tracking.experiment: experiment name",
            "control character '\\x00'")
    run = write(workdir / "run2.yaml", RUN)
    refused(capsys, ["run", str(run), "--no-mlflow", "--set", 'tracking.experiment="e\\0x"'],
            "control character '\\x00'")  # YAML's "\0" is NUL
    sweep = write(workdir / "sweep.yaml", {**SWEEP, "tracking": {"experiment": "e\nx"}})
    refused(capsys, ["sweep", str(sweep)], "control character '\\n'")
    assert sorted(p.name for p in workdir.iterdir()) == ["run.yaml", "run2.yaml", "sweep.yaml"]


def test_a_sweep_name_with_a_final_newline_is_refused_before_the_store(capsys, workdir):
    (workdir / "mlflow.db").write_bytes(b"")  # a store the command would otherwise open
    for command in ("runs", "report"):
        refused(capsys, [command, "p3\n"], "no sweep can be named 'p3\\n'")
    assert (workdir / "mlflow.db").stat().st_size == 0


# --- 4. reading commands never write a store ------------------------------------------------------

@pytest.mark.parametrize("content, fragment", [
    (b"", "is empty (no MLflow tables"),
    (b"not a database, just text\n" * 40, "cannot be read as an SQLite database")])
def test_reading_commands_never_set_up_a_store(capsys, workdir, content, fragment):
    db = workdir / "mlflow.db"
    db.write_bytes(content)
    for command in ("runs", "report"):
        refused(capsys, [command, "p3"], f"MLflow tracking database {db}", fragment)
    assert db.read_bytes() == content
    assert sorted(p.name for p in workdir.iterdir()) == ["mlflow.db"]


# --- 5. signals, locks, newer stores ---------------------------------------------------------------

def test_a_store_locked_by_another_process_is_named(tmp_path):
    from fco_ray.tracking.store import Store, TrackingUnavailable, check_store

    db = tmp_path / "mlflow.db"
    Store(f"sqlite:///{db}")  # MLflow's tables (and WAL mode, as a sweep leaves it)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("begin exclusive")
    try:
        started = time.monotonic()
        with pytest.raises(TrackingUnavailable, match=rf"MLflow tracking database {db} is locked by "
                                                      r"another process .*`fuser .*end that program"):
            check_store(f"sqlite:///{db}", timeout=1.0)
        assert time.monotonic() - started < 5
    finally:
        holder.rollback()
        holder.close()
    check_store(f"sqlite:///{db}", timeout=1.0)  # free again


def test_fco_ray_run_on_a_locked_store_says_so(capsys, workdir, monkeypatch):
    from fco_ray.tracking import store
    from fco_ray.tracking.store import Store

    monkeypatch.setattr(store, "STORE_WAIT_S", 1.0)  # the same refusal, 1 s instead of 10

    db = workdir / "mlflow.db"
    Store(f"sqlite:///{db}")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("begin exclusive")
    capsys.readouterr()  # MLflow's setup lines
    try:
        run = write(workdir / "run.yaml", {**RUN, "rounds": 2, "eval_every": 1})
        assert main(["run", str(run), "--quiet"]) == 1
    finally:
        holder.rollback()
        holder.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"MLflow tracking database {db} is locked by another process" in err
    assert "no write got through within 1 s" in err


def test_a_store_of_a_newer_mlflow_is_named_as_such(capsys, workdir):
    from fco_ray.tracking.store import Store

    db = workdir / "mlflow.db"
    Store(f"sqlite:///{db}")
    with sqlite3.connect(db) as connection:
        connection.execute("update alembic_version set version_num = 'ffffffffffff'")
    connection.close()
    capsys.readouterr()  # MLflow's setup lines
    for argv in (["runs", "p3"], ["run", str(write(workdir / "run.yaml", RUN))]):
        err = refused(capsys, argv, f"MLflow tracking database {db}", "'ffffffffffff'",
                      "written by a newer MLflow", "cannot go back")
        assert "mlflow db upgrade <" not in err


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_stops_a_sweep_as_ctrl_c_does(tmp_path, sig):
    """SIGTERM died in Ray's handler (rc 1, no message, parent RUNNING); Ctrl-C exited 0 and
    ended the parent FINISHED with its trials unfinished."""
    from fco_ray.tracking.queries import find_parent
    from fco_ray.tracking.store import Store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = {**SWEEP, "name": "term", "rounds": 500_000, "eval_every": 1000, "algorithms": ["fedmid"],
             "tune": {"metric": "f1", "mode": "max", "max_concurrent": 1},
             "tracking": {"uri": uri}}
    (tmp_path / "term.yaml").write_text(yaml.safe_dump(sweep))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    driver = subprocess.Popen([sys.executable, "-m", "fco_ray", "sweep", "term.yaml", "--storage",
                               str(tmp_path / "state")], cwd=tmp_path, env={**env, "PYTHONUNBUFFERED": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        store, deadline = Store(uri), time.monotonic() + 240
        while time.monotonic() < deadline:  # until a trial has logged rounds
            experiment = store.experiment_id("term", create=False)
            parent = find_parent(store, experiment, "term") if experiment else None
            runs = store.search(experiment, "tags.`fco.role` = 'trial'") if parent else []
            if runs and store.last_step(runs[0].info.run_id, "f1") >= 1000:
                break
            assert driver.poll() is None, driver.communicate()
            time.sleep(0.5)
        driver.send_signal(sig)  # the driver only, as a scheduler would
        _, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"fco-ray: error: SweepInterrupted: sweep term stopped by {sig.name}"), err[-3000:]
    assert last.endswith("finish it with: fco-ray sweep term.yaml --resume"), last
    assert "Traceback" not in err and "SIGTERM received" not in err, err[-3000:]
    assert store.client.get_run(parent.info.run_id).info.status == "KILLED"  # not left RUNNING
    assert {r.info.status for r in store.search(experiment, "tags.`fco.role` = 'trial'")} == {"KILLED"}


# --- 6. sizes declared inside data files -----------------------------------------------------------

def test_an_emnist_file_declaring_a_huge_array_is_refused_naming_it(tmp_path):
    h5py = pytest.importorskip("h5py")
    from fco_ray.data.emnist import load_emnist

    for part in ("train", "test"):
        with h5py.File(tmp_path / f"fed_emnist_digitsonly_{part}.h5", "w") as f:
            f.create_dataset("examples/w0/pixels", shape=(200_000_000, 28, 28), dtype="f4", chunks=(1, 28, 28))
            f.create_dataset("examples/w0/label", shape=(200_000_000,), dtype="i4", chunks=(1024,))
    assert (tmp_path / "fed_emnist_digitsonly_train.h5").stat().st_size < 100_000
    with pytest.raises(ConfigError, match=r"fed_emnist_digitsonly_train.h5: EMNIST file declares the arrays "
                                          r"of 1 client .*examples/w0/pixels of shape \(200000000, 28, 28\).*"
                                          r"58\d.\d GiB in memory, more than the .* available"):
        load_emnist(tmp_path)


def test_a_nifti_volume_declaring_a_huge_shape_is_refused_naming_it(tmp_path):
    nibabel = pytest.importorskip("nibabel")
    pytest.importorskip("nilearn")
    from fco_ray.data.haxby import _load_volume

    header = nibabel.Nifti1Header()
    header.set_data_shape((4096, 4096, 4096, 64))
    header.set_data_dtype(np.int16)
    header.set_data_offset(352)
    path = tmp_path / "mask.nii.gz"
    with gzip.open(path, "wb") as f:
        f.write(header.binaryblock + b"\x00" * (352 - len(header.binaryblock)) + b"\x00" * 4096)
    with pytest.raises(ConfigError, match=r"mask.nii.gz: Haxby file declares a volume of shape "
                                          r"\(4096, 4096, 4096, 64\): 16.0 TiB in memory, more than"):
        _load_volume(path)


def test_a_checkpoint_declaring_a_huge_array_is_refused_naming_it(tmp_path):
    from fco_ray.core.checkpoint import FILE, load_snapshot

    header = {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
    with zipfile.ZipFile(tmp_path / FILE, "w") as archive, archive.open("state/w.npy", "w") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(b"\x00" * 64)
    with pytest.raises(ConfigError, match=r"state.npz: checkpoint declares 1 array .*state/w.npy of shape "
                                          r"\(1000000000000,\).*7.3 TiB in memory"):
        load_snapshot(tmp_path)


# --- 7. messages that say what is wrong ------------------------------------------------------------

def test_a_backend_without_its_name_says_so(capsys, workdir):
    run = write(workdir / "run.yaml", RUN)
    refused(capsys, ["run", str(run), "--no-mlflow", "--set", "backend.device=cuda"],
            "backend.name is needed to say which backend is meant; allowed names: ['local', 'ray']")
    refused(capsys, ["run", str(run), "--no-mlflow", "--set", "backend.name=rya"],
            "backend.name: unknown name 'rya'; allowed names: ['local', 'ray']")


def test_an_unquoted_uri_ending_in_a_colon_is_read_as_text(capsys, workdir):
    run = write(workdir / "run.yaml", RUN)
    refused(capsys, ["run", str(run), "--set", "tracking.uri=sqlite:///:memory:"],
            "tracking.uri: tracking URI 'sqlite:///:memory:' is an in-memory SQLite database")
    from fco_ray.runtime.files import apply_overrides

    assert apply_overrides({}, ["a=sqlite:///x.db:", "b={c: 1}"]) == {"a": "sqlite:///x.db:", "b": {"c": 1}}


@pytest.mark.parametrize("address", ["ray://127.0.0.1:{port}", "ray://127.0.0.1:{port}/"])
def test_a_ray_client_address_at_a_server_that_is_not_ray_fails_fast(capsys, workdir, monkeypatch, address,
                                                                   ray_down):
    import http.server
    import threading

    srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    srv.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("RAY_ADDRESS", address.format(port=srv.server_port))
        path = write(workdir / "s.yaml", {**SWEEP, "tracking": {"uri": f"sqlite:///{workdir}/m.db"}})
        started = time.monotonic()
        assert main(["sweep", str(path), "--storage", str(workdir / "state")]) == 1
        err = capsys.readouterr().err
        assert time.monotonic() - started < 10, err
        assert err.count("\n") == 1 and f"the server at 'ray://127.0.0.1:{srv.server_port}" in err
        assert "is not a Ray cluster: a Ray Client server (ray://) speaks gRPC" in err
    finally:
        srv.shutdown()


def test_a_ray_client_server_passes_the_probe():
    """Ray's own client server (what `ray start --head` serves on 10001) answers the probe."""
    import socket

    from ray.util.client.server.server import serve

    from fco_ray.backends.cluster import _check_listening

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = serve("127.0.0.1", port)
    try:
        _check_listening(f"ray://127.0.0.1:{port}")
    finally:
        server.stop(0)


def test_a_deleted_working_directory_is_named(capsys, tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    refused(capsys, ["runs", "p3"], "the working directory no longer exists")
    from fco_ray.tracking.store import default_uri

    with pytest.raises(ConfigError, match="the working directory no longer exists"):  # the API's default
        default_uri()


def test_a_libsvm_qid_that_is_not_an_integer_names_its_line(tmp_path):
    from fco_ray.data.libsvm import read_libsvm

    path = tmp_path / "bad.svm"
    path.write_text("1 qid:1 1:0.5\n# a comment\n0 qid:2.0 2:1\n")
    with pytest.raises(ValueError, match=r"bad\.svm, line 3: not a valid LIBSVM line \(invalid literal "
                                         r"for int\(\).*b'2.0'\); a line is `label \[qid:<integer>\]"):
        read_libsvm(path)
