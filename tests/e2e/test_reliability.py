"""Reliability, round three: inputs that lost data, were read with a wrong meaning, or made a
sweep wait without end. Each is refused with one line naming the file, line or key (exit 2)
before any work, or stops cleanly and stays resumable."""
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from fco_ray.cli import main

from tests.e2e.test_bad_input import RUN, SWEEP, changed

REPO = Path(__file__).resolve().parents[2]


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
                          capture_output=True, check=False)
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
def test_disk_filling_during_a_sweep_stops_it_resumable(workdir, monkeypatch, local_ray):
    """Tune's storage is a real small tmpfs; a filler leaves the reserve (lowered to 1 MiB
    for the test) plus a little: the sweep's own writes cross it, the sweep stops with the
    --resume command, and once the filler is gone `--resume` finishes every trial, each
    child run's rounds logged once."""
    ray = pytest.importorskip("ray")
    from fco_ray.sweep import SweepInterrupted, run_sweep
    from fco_ray.sweep import storage as storage_module
    from fco_ray.tracking.queries import children, find_parent
    from fco_ray.tracking.store import Store

    storage = workdir / "small"
    _mount_tmpfs(storage, "8m")
    monkeypatch.setattr(storage_module, "RESERVE_BYTES", 2**20)
    local_ray.up()
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
        subprocess.run(["umount", str(storage)], check=False)


# --- data files read with a wrong meaning, or not at all --------------------------------------

def svm(tmp_path, name, lines) -> str:
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines))
    return str(path)


def libsvm_run(path, **problem):
    import fco_ray

    return fco_ray.run({"problem": {"name": "sparse_text_logreg", "dataset": "libsvm", "path": path,
                                    **problem}, "algorithm": {"name": "gd"}, "rounds": 1})


@pytest.mark.parametrize("lines, match", [
    # qid on some lines only: scikit-learn pairs the qids it found with rows by position
    (["1 qid:1 1:0.5", "0 qid:1 2:1", "1 3:1", "0 qid:2 1:1"],
     r"bad\.svm, line 3: no 'qid:' field, while other lines have one \(3 of 4 lines\)"),
    (["1 qid:1 1:0.5", "1 qid:9223372036854775808 1:1"], r"bad\.svm, line 2: a feature index >= 2\^31 or a qid >= 2\^63"),
    (["1 qid:1 1:0.5", "# x", "1 qid:2 4294967296:1"], r"bad\.svm, line 3: a feature index >= 2\^31"),
    # 1-based (no index 0): index 2^24 is the 2^24+1-th feature, one too many
    (["1 qid:1 1:0.5", "0 qid:2 16777216:1"], r"bad\.svm, line 2: feature index 16,777,216 is out of range"),
    ([], r"bad\.svm: no data lines \(the file is empty or holds only comments\)"),
    (["# only", "# comments"], r"bad\.svm: no data lines"),
])
def test_libsvm_misreads_are_errors_naming_the_line(tmp_path, lines, match):
    from fco_ray.data.libsvm import load_libsvm_problem_data

    path = svm(tmp_path, "bad.svm", lines)
    with pytest.raises(ValueError, match=match):
        load_libsvm_problem_data(path, test_fraction=0.0)
    from fco_ray import ConfigError

    with pytest.raises(ConfigError, match=match):  # through the config: exit 2
        libsvm_run(path)


def test_libsvm_index_just_below_the_bound_is_read(tmp_path):
    from fco_ray.data.libsvm import MAX_FEATURES, read_libsvm

    x, *_ = read_libsvm(svm(tmp_path, "ok.svm", ["1 qid:1 1:0.5", "0 qid:2 16777215:1"]))
    assert x.shape[1] == MAX_FEATURES - 1  # 1-based: indices 1..2^24-1


def test_group_file_is_split_on_newlines_only(tmp_path):
    """A form feed (or \\x1c, \\u2028) inside an id is part of the id: str.splitlines would
    split there, pass the count check with one line less elsewhere, and shift every row."""
    from fco_ray.data.libsvm import read_groups

    path = tmp_path / "g.txt"
    path.write_bytes("a\fb\nc\r\nd\u2028e\n".encode())
    assert read_groups(path, 3).tolist() == ["a\fb", "c", "d\u2028e"]
    with pytest.raises(ValueError, match="3 node ids for 4 training lines"):
        read_groups(path, 4)
    path.write_bytes(b"a\n\xff\n")
    with pytest.raises(ValueError, match=r"g\.txt:2: problem.group_file is not UTF-8 text"):
        read_groups(path, 2)


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_data_path_that_is_not_a_file(tmp_path, kind):
    """A directory, a FIFO (never opened: reading it would block) or /dev/zero."""
    from fco_ray import ConfigError

    path = {"directory": tmp_path, "fifo": tmp_path / "fifo", "device": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    what = {"directory": "is a directory", "fifo": "is not a regular file",
            "device": "is not a regular file"}[kind]
    with pytest.raises(ConfigError, match=f"{path}: problem.path \\(LIBSVM file\\) {what}"):
        libsvm_run(str(path))
    good = svm(tmp_path, "ok.svm", ["1 qid:1 1:1", "0 qid:2 1:2"])
    with pytest.raises(ConfigError, match=what):
        libsvm_run(good, group_file=str(path))


# --- config values read with a wrong meaning ----------------------------------------------------

@pytest.mark.parametrize("text, fragment", [
    ("rounds: 1:20\n", ":9: invalid YAML: 1:20 is a base-60 number in YAML 1.1 (= 80)"),
    ("seed: 1:00\n", ":7: invalid YAML: 1:00 is a base-60 number in YAML 1.1 (= 60)"),
    ("algorithm: {name: fedmid, client_lr: 1:20.5}\n", "1:20.5 is a base-60 number"),
])
def test_yaml_base_60_numbers_are_refused(capsys, workdir, text, fragment):
    run = yaml.safe_load(yaml.safe_dump({k: v for k, v in RUN.items() if k not in yaml.safe_load(text)}))
    path = workdir / "run.yaml"
    head = yaml.safe_dump(run)
    path.write_text(head + text)
    line = head.count("\n") + 1
    refused(capsys, ["run", str(path)], f"{path}:{line}:" if text[0] != "a" else f"{path}", fragment)


def test_set_base_60_and_exponent_floats(capsys, workdir):
    path = write(workdir / "run.yaml", RUN)
    refused(capsys, ["run", str(path), "--set", "seed=1:00"], "--set seed: cannot parse value '1:00'",
            "base-60 number in YAML 1.1 (= 60)")
    from fco_ray.runtime.files import parse_yaml

    # YAML 1.1 reads 1e-3 as text; the config loader reads it as the number it is
    assert parse_yaml("a: 1e-3\nb: -2E+5\nc: '1e-3'\nd: 1:20:x\n") == {
        "a": 0.001, "b": -200000.0, "c": "1e-3", "d": "1:20:x"}


@pytest.mark.parametrize("key", ["algorithm..client_lr", ".rounds", "rounds.", "algorithm. .x", "."])
def test_malformed_set_keys_are_refused(capsys, workdir, key):
    path = write(workdir / "run.yaml", RUN)
    refused(capsys, ["run", str(path), "--set", f"{key}=5"], f"--set {key!r}: a key path is names "
            "joined by single dots", "empty part")


@pytest.mark.parametrize("entry, value", [
    ("rounds", "5"), ("algorithm.client_lr", "0.01"), ("seed", "1"), ("problem.dim", "64"),
    ("eval_every", "1e1"), ("problem.samples_per_client", ["32"] * 16)])
def test_a_string_is_never_a_number_from_the_api(entry, value):
    import fco_ray
    from fco_ray import ConfigError

    with pytest.raises(ConfigError, match=f"{entry}: expected a number, got (the|a) string"):
        fco_ray.run(changed(RUN, {entry: value}))


def test_a_string_is_never_a_number_in_a_sweep(capsys, workdir):
    for changes, fragment in [({"seeds": ["0"]}, "seeds: expected a number, got a string in ['0']"),
                              ({"rounds": "10"}, "rounds: expected a number, got the string '10'"),
                              ({"search.samples": "2"}, "search.samples: expected a number"),
                              ({"algorithm.local_steps": "5"}, "algorithm.local_steps: expected a number")]:
        path = write(workdir / "s.yaml", changed(SWEEP, changes))
        refused(capsys, ["sweep", str(path)], fragment)


@pytest.mark.parametrize("grid, fragment", [
    ([0.01, 0.01], "lists 0.01 and 0.01: the same value twice"),
    ([0.01, "0.01"], "lists 0.01 and '0.01'"), ([1, 1.0], "lists 1 and 1.0")])
def test_repeated_grid_values_are_refused(capsys, workdir, grid, fragment):
    path = write(workdir / "s.yaml", changed(SWEEP, {"search.grid": {"algorithm.client_lr": grid}}))
    refused(capsys, ["sweep", str(path)], f"{path}: search: grid 'algorithm.client_lr' {fragment}")


def test_names_too_long_for_mlflow_or_the_file_system(capsys, workdir):
    path = write(workdir / "s.yaml", changed(SWEEP, {"tracking": {"experiment": "e" * 300}}))
    refused(capsys, ["sweep", str(path)], "tracking.experiment: String should have at most 256 characters")
    path = write(workdir / "s.yaml", changed(SWEEP, {"name": "n" * 300}))
    refused(capsys, ["sweep", str(path)], "name: String should have at most 128 characters")
    assert sorted(p.name for p in workdir.iterdir()) == ["s.yaml"]


@pytest.mark.parametrize("config, fragments", [
    ({"algorithm": {"name": "fedmd"}}, [("algorithm.name: unknown algorithm 'fedmd' (did you mean "
                                         "'fedmid'?); algorithms for problem 'lasso': ['centralized'")]),
    ({"algorithm": {"name": "fedsvrg"}}, ["'fsvrg' is close but does not fit problem 'lasso'"]),
    ({"problem": {"name": "laso"}}, ["problem.name: unknown problem 'laso' (did you mean 'lasso'?)"]),
])
def test_did_you_mean_and_only_the_algorithms_that_fit(config, fragments):
    import fco_ray
    from fco_ray import ConfigError

    with pytest.raises(ConfigError) as err:
        fco_ray.run({**RUN, **config})
    for fragment in fragments:
        assert fragment in str(err.value)
    if "problem" not in config:
        assert "fsvrg" not in str(err.value).split("algorithms for problem")[1]  # only what fits


def test_store_side_files_are_ignored_by_git_and_ray_uploads(tmp_path):
    names = ["mlflow.db", "mlflow.db.lock", "mlflow.db-wal", "mlflow.db-shm"]
    done = subprocess.run(["git", "-C", str(REPO), "check-ignore", *names], capture_output=True,
                          text=True, check=False)
    if done.returncode == 128:
        pytest.skip("not a git checkout")
    assert done.stdout.split() == names
    import logging

    from ray._private.runtime_env.packaging import get_excludes_from_ignore_files

    (tmp_path / ".gitignore").write_text((REPO / ".gitignore").read_text())
    for name in [*names, "run.yaml"]:
        (tmp_path / name).write_text("x")
    # what `ray job submit --working-dir` leaves out (it honours .gitignore by default)
    excluded = get_excludes_from_ignore_files(tmp_path, include_gitignore=True,
                                              logger=logging.getLogger("test"))
    kept = [n for n in [*names, "run.yaml"] if not any(f(tmp_path / n) for f in excluded)]
    assert kept == ["run.yaml"]


# --- waits without end ---------------------------------------------------------------------------

def test_impossible_cpu_requests_are_refused():
    from fco_ray import ConfigError
    from fco_ray.backends.cluster import check_cluster_fits

    check_cluster_fits({"t": [{"CPU": 1.0}, {"CPU": 0.5}]}, [1.0, 1.0], "c")  # fits
    with pytest.raises(ConfigError, match=r"a trial \(t\) needs 65 CPUs .* but c has 2 CPUs on 1 node"):
        check_cluster_fits({"t": [{"CPU": 1.0}] + [{"CPU": 1.0}] * 64}, [2.0], "c")
    with pytest.raises(ConfigError, match=r"the largest 4\), but c has 4 CPUs on 2 node.*at most 2 on one"):
        check_cluster_fits({"t": [{"CPU": 4.0}]}, [2.0, 2.0], "c")


def test_infinite_cpus_are_refused(capsys, workdir):
    path = write(workdir / "s.yaml", changed(SWEEP, {"backend": {"name": "ray", "cpus_per_actor": float("inf")}}))
    refused(capsys, ["sweep", str(path)], "backend.cpus_per_actor: Input should be a finite number")
    path = write(workdir / "s.yaml", changed(SWEEP, {"tune.cpus_per_trial": float("inf")}))
    refused(capsys, ["sweep", str(path)], "tune.cpus_per_trial: Input should be a finite number")


@pytest.mark.slow  # two CLI processes
@pytest.mark.parametrize("backend, fragment", [
    ({"name": "ray", "actors": 64}, "needs 65 CPUs"), ({"name": "ray", "cpus_per_actor": 4}, "the largest 4")])
def test_a_sweep_that_cannot_fit_the_local_cluster_fails_before_ray_starts(workdir, backend, fragment, ray_down):
    # In its own process, as a user runs it. The trials need more CPUs than this machine has,
    # so the local cluster the sweep would start cannot hold them: refused before Ray's daemons
    # start (none writes its session into the private RAY_TMPDIR).
    path = write(workdir / "s.yaml", changed(SWEEP, {"backend": backend, "tracking": {"uri": f"sqlite:///{workdir}/m.db"}}))
    ray_tmp = Path(tempfile.mkdtemp(prefix="fco-ray-tmp-"))  # short: Ray's socket paths live in it
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_TMPDIR": str(ray_tmp)}
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "fco_ray", "sweep", str(path), "--storage", str(workdir / "state")],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert time.monotonic() - started < 60
        assert not any(ray_tmp.rglob("session_*")), sorted(ray_tmp.rglob("*"))[:10]  # no cluster started
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, done.stderr
    for part in (fragment, "the local Ray cluster has", "lower backend.actors"):
        assert part in line, done.stderr
    from mlflow import MlflowClient

    assert not MlflowClient(f"sqlite:///{workdir}/m.db").search_runs(["0"])  # no parent run left


@pytest.mark.parametrize("server", ["http", "silent"])
def test_ray_address_at_a_port_that_is_not_ray_fails_fast(capsys, workdir, monkeypatch, server,
                                                      ray_down):
    import http.server
    import socket
    import threading

    if server == "http":
        srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        srv.RequestHandlerClass.log_message = lambda *a: None
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        port = srv.server_port
    else:  # accepts and never answers
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
    from fco_ray.backends import cluster

    monkeypatch.setattr(cluster, "ANSWER_WAIT_S", 0.5)  # the silent server: 0.5 s instead of 10
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    path = write(workdir / "s.yaml", {**SWEEP, "tracking": {"uri": f"sqlite:///{workdir}/m.db"}})
    started = time.monotonic()
    assert main(["sweep", str(path), "--storage", str(workdir / "state")]) == 1
    err = capsys.readouterr().err
    assert time.monotonic() - started < 30
    assert err.count("\n") == 1 and f"the server at '127.0.0.1:{port}'" in err
    assert "is not a Ray cluster: a Ray head's GCS port speaks gRPC" in err
    srv.shutdown() if server == "http" else srv.close()


@pytest.mark.ray
def test_a_real_ray_head_passes_the_protocol_check(ray_cluster):
    import ray

    from fco_ray.backends.cluster import _check_listening

    _check_listening(ray.get_runtime_context().gcs_address)


# --- bounded expansion -----------------------------------------------------------------------------

@pytest.mark.parametrize("changes, fragment", [
    ({"seeds": list(range(5_000))}, "seeds: List should have at most 1000 items"),
    ({"search.grid": {"algorithm.client_lr": [10.0**-k for k in range(300)],
                      "algorithm.local_steps": list(range(1, 101))}},
     ("the sweep expands to 60,000 configurations (fedmid: 30,000, feddualavg: 30,000: seeds (1) x "
      "grid algorithm.client_lr (300) x algorithm.local_steps (100) x search.samples (1)); at most 20,000")),
    ({"search.grid": {"algorithm.client_lr": [1e-3 * (1 + k) for k in range(1000)],
                      "algorithm.local_steps": list(range(1, 1001))}}, "expands to 2,000,000 configurations"),
    ({"search": {"random": {"algorithm.client_lr": {"loguniform": [1e-4, 1e-1]}}, "samples": 2_000_000}},
     "search.samples: Input should be less than or equal to 20000"),
    ({"tune.fuse_max": 20_000}, "tune.fuse_max: Input should be less than or equal to 1024"),
    ({"rounds": 1e20}, "rounds: Unable to parse input string as an integer, exceeded maximum size"),
    ({"rounds": 10**12}, "rounds: Input should be less than or equal to 10000000"),
])
def test_what_a_sweep_expands_to_is_bounded_before_anything_is_expanded(capsys, workdir, changes, fragment):
    path = write(workdir / "s.yaml", changed(SWEEP, changes))
    started = time.monotonic()
    refused(capsys, ["sweep", str(path)], fragment)
    assert time.monotonic() - started < 10  # refused by counting, not by expanding


def test_run_rounds_are_bounded():
    import fco_ray
    from fco_ray import ConfigError

    with pytest.raises(ConfigError, match="rounds: Input should be less than or equal to 10000000"):
        fco_ray.run({**RUN, "rounds": 10**20})


def test_trials_at_once_must_fit_in_memory_together(tmp_path):
    """Each trial fits alone; the machine's CPUs would run 2 at once, which do not."""
    from fco_ray import ConfigError
    from fco_ray.sweep.checks import check_memory, load_sweep

    path = write(tmp_path / "s.yaml", changed(SWEEP, {"tune.max_concurrent": 2}))
    sweep = load_sweep(path)
    config = sweep.run_config(next(sweep.points()))
    one = sum(config.problem.estimated_bytes().values())
    check_memory(sweep, [config], path, available=2 * one)  # fits exactly
    with pytest.raises(ConfigError, match=r"2 trials at once .* need about .* set tune.max_concurrent "
                                          r"to at most 1"):
        check_memory(sweep, [config], path, available=2 * one - 1)


# --- unclear errors: exit 2 naming the file, line or key ------------------------------------------

def _mlflow_db(path: Path) -> str:
    from mlflow import MlflowClient

    uri = f"sqlite:///{path}"
    MlflowClient(uri).search_experiments()  # creates the tables
    return uri


@pytest.mark.parametrize("case", ["other_application", "read_only", "dev_null_link", "directory"])
def test_unusable_mlflow_database_files_name_the_reason(capsys, workdir, case):
    import sqlite3

    db = workdir / "mlflow.db"
    fragment = {"other_application": "is not an MLflow store: it holds another application's tables ['notes']",
                "read_only": "is read-only", "dev_null_link": "(a link to /dev/null): not a regular file",
                "directory": ": a directory"}[case]
    if case == "other_application":
        with sqlite3.connect(db) as connection:
            connection.execute("create table notes (x text)")
        connection.close()
    elif case == "read_only":
        _mlflow_db(db)
        if subprocess.run(["chattr", "+i", str(db)], capture_output=True, check=False).returncode:
            pytest.skip("chattr +i is not permitted here")
    elif case == "dev_null_link":
        os.symlink("/dev/null", db)
    else:
        db.mkdir()
    capsys.readouterr()  # MLflow's own lines while it made the database
    try:
        run = write(workdir / "run.yaml", {**RUN, "tracking": {"uri": f"sqlite:///{db}"}})
        refused(capsys, ["run", str(run)], f"MLflow tracking database {db}", fragment)
        if case != "read_only":  # reading a read-only store is fine
            refused(capsys, ["runs", "x", "--tracking-uri", f"sqlite:///{db}"], fragment)
    finally:
        if case == "read_only":
            subprocess.run(["chattr", "-i", str(db)], check=False)


@pytest.mark.parametrize("key", ["x" * 10_000, "it's", 'a"b', "a b", "../x"])
def test_sweep_names_that_no_sweep_can_have(capsys, workdir, key):
    uri = _mlflow_db(workdir / "mlflow.db")
    capsys.readouterr()
    for command in ("runs", "report"):
        err = refused(capsys, [command, key, "--tracking-uri", uri], f"{command}: no sweep can be named")
        assert len(err) < 400  # never the whole argument


def test_report_reads_the_sweep_artifact_with_the_bounded_loader(tmp_path):
    """A hostile sweep.yaml artifact on a parent run: a Python tag or an alias bomb is a
    ConfigError naming the run, never executed or expanded."""
    from mlflow import MlflowClient

    from fco_ray import ConfigError
    from fco_ray.report.data import _sweep_file

    client = MlflowClient(_mlflow_db(tmp_path / "mlflow.db"))
    run = client.create_run(client.create_experiment("x", artifact_location=(tmp_path / "a").as_uri()))
    marker = tmp_path / "pwned"
    client.log_text(run.info.run_id, f"name: !!python/object/apply:os.system ['touch {marker}']\n",
                    "sweep.yaml")
    with pytest.raises(ConfigError, match=f"sweep parent run {run.info.run_id}: .*could not determine a constructor"):
        _sweep_file(client, run.info.run_id)
    assert not marker.exists()


def test_address_space_limit_counts_as_memory(monkeypatch):
    """Under `ulimit -v` the memory estimate compares with the address space left."""
    import resource

    from fco_ray.runtime import limits

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = limits._address_space_used()
    assert used > 0
    monkeypatch.setattr(resource, "getrlimit", lambda which: (used + 2**20, hard) if which == resource.RLIMIT_AS
                        else (soft, hard))
    assert limits.available_bytes() <= 2**20


def test_a_cached_optimum_whose_header_claims_10_12_floats_is_solved_again(tmp_path, monkeypatch):
    """Never allocated (np.load would raise MemoryError): the header is read first."""
    import numpy as np

    from fco_ray.problems.text import _load_cached_vector

    good = tmp_path / "good.npy"
    np.save(good, np.arange(5.0))
    np.testing.assert_array_equal(_load_cached_vector(good, 5), np.arange(5.0))
    assert _load_cached_vector(good, 6) is None
    huge = tmp_path / "huge.npy"
    huge.write_bytes(good.read_bytes().replace(b"(5,)", b"(10" + b"0" * 11 + b",)", 1))
    assert b"1000000000000," in huge.read_bytes()
    assert _load_cached_vector(huge, 10**12) is None  # shorter than its header: not loaded
    assert _load_cached_vector(huge, 5) is None
    truncated = tmp_path / "short.npy"
    truncated.write_bytes(good.read_bytes()[:-8])
    assert _load_cached_vector(truncated, 5) is None


@pytest.mark.parametrize("backend, fragment", [
    ({"name": "ray", "actors": 64}, "needs 64 CPUs"), ({"name": "ray", "cpus_per_actor": 4}, "the largest 4")])
def test_a_run_whose_actors_cannot_fit_this_machine_fails_before_ray_starts(capsys, workdir, backend, fragment,
                                                                              ray_down):
    import ray

    if ray.is_initialized():
        pytest.skip("this process is already connected to a Ray cluster")
    cpus = os.cpu_count()
    if backend.get("actors", 2) * backend.get("cpus_per_actor", 1) <= cpus:
        pytest.skip(f"this machine has {cpus} CPUs")
    path = write(workdir / "run.yaml", {**RUN, "backend": backend})
    started = time.monotonic()
    refused(capsys, ["run", str(path), "--no-mlflow"], fragment, "the local Ray cluster (this machine)")
    assert time.monotonic() - started < 30 and not ray.is_initialized()
