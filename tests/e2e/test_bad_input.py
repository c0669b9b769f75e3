"""Malformed sweep files, run files and API calls: each is rejected before any work with one
message naming the file, key, value and what is allowed; the CLI exits with code 2; nothing
is written to MLflow, Tune's storage or Ray. Then the safe defaults: servers in the docs bind
127.0.0.1, Ray token authentication stays on, nothing unpickles or evaluates untrusted data
(README "Reliability")."""
import copy
import gzip
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from mlflow import MlflowClient

import fco_ray
from fco_ray.cli import main
from fco_ray.data.text_generator import generate_text_nodes
from fco_ray.problems.text import SparseTextLogReg, data_fingerprint
from fco_ray.runtime.errors import ConfigError
from fco_ray.runtime.files import _ConfigLoader

LASSO = {"name": "lasso", "clients": 16, "dim": 64, "support": 8, "val_clients": 4,
         "samples_per_client": 32}
HAXBY_MISSING = {"name": "sparse_logreg", "dataset": "haxby", "path": "/nonexistent"}
SWEEP = {"name": "bad", "problem": LASSO, "algorithms": ["fedmid", "feddualavg"],
         "algorithm": {"clients_per_round": 4, "local_steps": 5},
         "search": {"grid": {"algorithm.client_lr": [0.001, 0.01]}},
         "rounds": 10, "eval_every": 5, "report": False, "tune": {"metric": "f1", "mode": "max"}}
RUN = {"problem": LASSO, "rounds": 10, "eval_every": 5,
       "algorithm": {"name": "fedmid", "client_lr": 0.001, "clients_per_round": 4}}
DROP = object()


def changed(base: dict, changes: dict) -> dict:
    """`base` with dotted keys set (or removed with DROP)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        *parents, last = key.split(".")
        node = out
        for part in parents:
            node = node[part]
        if value is DROP:
            del node[last]
        else:
            node[last] = value
    return out


# (case id, sweep changes, fragments the one-line message must contain after the file name)
SWEEP_CASES = [
    ("unknown_key", {"bogus": 1}, ["unknown key 'bogus'", "allowed keys here", "'algorithms'"]),
    ("unknown_problem_key", {"problem.dimm": 3},
     ["unknown key 'problem.dimm'", "allowed keys here", "'dim'"]),
    ("unknown_hyperparameter", {"algorithm.local_stepz": 3},
     ["unknown key 'algorithm.local_stepz'", "'local_steps'"]),
    ("unknown_tune_key", {"tune.metrc": "f1"}, ["unknown key 'tune.metrc'", "'metric'"]),
    ("unknown_algorithm", {"algorithms": ["fedmid", "feddualavgg"]},
     ["algorithms: unknown algorithm 'feddualavgg' (did you mean 'feddualavg'?); algorithms for problem "
      "'lasso': [", "'feddualavg'"]),
    ("wrong_type_int", {"rounds": "ten"}, ["rounds: expected a number, got the string 'ten'"]),
    ("wrong_type_list", {"seeds": 3}, ["seeds: Input should be a valid list", "(got 3)"]),
    ("wrong_type_hyperparameter", {"algorithm.local_steps": "five"},
     ["algorithm.local_steps: expected a number, got the string 'five'"]),
    ("zero_rate", {"search.grid": {"algorithm.client_lr": [0.001, 0.0]}},
     ["trial (algorithm.name=fedmid, seed=0, algorithm.client_lr=0.0)",
      "algorithm.client_lr: Input should be greater than 0 (got 0.0)"]),
    ("negative_rate", {"algorithm.server_lr": -1.0},
     ["algorithm.server_lr: Input should be greater than 0 (got -1.0)"]),
    ("nan_rate", {"search.grid": {"algorithm.client_lr": [math.nan]}},
     ["algorithm.client_lr=nan", "algorithm.client_lr: Input should be a finite number (got nan)"]),
    ("inf_regularization", {"problem.lam": math.inf},
     ["problem.lam: Input should be a finite number (got inf)"]),
    ("inf_random_bound", {"search": {"random": {"algorithm.client_lr": {"loguniform": [1e-3, math.inf]}}}},
     ["algorithm.client_lr=inf", "Input should be a finite number (got inf)"]),
    ("empty_grid", {"search.grid": {"algorithm.client_lr": []}},
     ["search: grid 'algorithm.client_lr' has no values"]),
    ("empty_algorithms", {"algorithms": []}, ["algorithms: List should have at least 1 item"]),
    ("empty_seeds", {"seeds": []}, ["seeds: List should have at least 1 item"]),
    ("clients_per_round_above_clients", {"algorithm.clients_per_round": 17},
     ["algorithm.clients_per_round must be <= 16", "has 16 training clients), got 17"]),
    ("zero_clients_per_round", {"algorithm.clients_per_round": 0},
     ["algorithm.clients_per_round: Input should be greater than or equal to 1 (got 0)"]),
    ("zero_clients", {"problem.clients": 0},
     ["problem.clients: Input should be greater than or equal to 1 (got 0)"]),
    ("zero_actors", {"backend": {"name": "ray", "actors": 0}},
     ["backend.actors: Input should be greater than or equal to 1 (got 0)"]),
    ("support_above_dim", {"problem.support": 65}, ["problem.support must be <= problem.dim (64), got 65"]),
    ("missing_data_path", {"problem": HAXBY_MISSING},
     ["problem.path: no Haxby dataset", "found in /nonexistent"]),
    ("bad_name", {"name": "my sweep"}, ["name: String should match pattern", "'my sweep'"]),
    ("duplicate_seeds", {"seeds": [0, 0]}, ["seeds must be distinct", "got [0, 0]"]),
    ("bool_seed", {"seeds": [True]}, ["seeds: expected a number, got a boolean in [True]"]),
    ("bool_rounds", {"rounds": True}, ["rounds: expected a number, got the boolean True"]),
    ("unknown_dashboard", {"report": "nosuch"}, ["report: unknown dashboard 'nosuch'; available:"]),
    ("bad_dashboard_type", {"report": 3}, ["report: expected a dashboard name or path, or false"]),
]

RUN_CASES = [
    ("unknown_key", {"bogus": 1}, ["unknown top-level key(s) ['bogus']; allowed:", "'rounds'"]),
    ("unknown_backend_key", {"backend": {"name": "ray", "actorz": 2}},
     ["unknown key 'backend.actorz'; allowed keys here:", "'actors'"]),
    ("unknown_problem", {"problem": {"name": "lassoo"}},
     ["problem.name: unknown problem 'lassoo' (did you mean 'lasso'?); problems: [", "'lasso'"]),
    ("wrong_type", {"eval_every": "often"}, ["eval_every: expected a number, got the string 'often'"]),
    ("zero_rate", {"algorithm.client_lr": 0}, ["algorithm.client_lr: Input should be greater than 0 (got 0)"]),
    ("nan_rate", {"algorithm.client_lr": math.nan}, ["algorithm.client_lr: Input should be a finite number (got nan)"]),
    ("zero_rounds", {"rounds": 0}, ["rounds: Input should be greater than or equal to 1 (got 0)"]),
    ("clients_per_round_above_clients", {"algorithm.clients_per_round": 17},
     ["algorithm.clients_per_round must be <= 16", "got 17"]),
    ("missing_data_path", {"problem": HAXBY_MISSING}, ["problem.path: no Haxby dataset", "/nonexistent"]),
    # strict types: YAML 1.1 reads yes/on as booleans; a boolean is never a number
    ("bool_for_int", {"rounds": True}, ["rounds: expected a number, got the boolean True"]),
    ("bool_for_float", {"algorithm.client_lr": True},
     ["algorithm.client_lr: expected a number, got the boolean True"]),
    ("bool_in_int_list", {"problem.samples_per_client": [32] * 15 + [True]},
     ["problem.samples_per_client: expected a number, got a boolean in [32, 32,"]),
    ("tracking_uri_not_a_uri", {"tracking.uri": "nonsense"},
     ["tracking.uri: tracking URI 'nonsense' is not an MLflow store URI", "'sqlite'"]),
    ("long_experiment_name", {"tracking.experiment": "x" * 20000},
     ["tracking.experiment: String should have at most 256 characters (got 'xxx"]),
    # size bounds: estimated from the config, before anything is allocated
    ("huge_dim", {"problem.dim": 200_000_000},
     ["problem 'lasso' needs about", "TiB of memory, more than the", "available",
      "problem.dim=200000000"]),
    ("huge_clients", {"problem.clients": 2_000_000_000},
     ["problem 'lasso' needs about", "TiB of memory", "problem.clients=2000000000"]),
    ("huge_mlp", {"problem": {"name": "mlp", "hidden": [200_000, 200_000]}},
     ["problem 'mlp' needs about", "TiB of memory", "the model (problem.hidden=[200000, 200000]"]),
]

# files that are not valid YAML data at all: the same for `sweep` and `run`
TEXT_CASES = [
    ("yaml_syntax", "name: bad\nproblem: {name: lasso\n",
     [":3:1: invalid YAML: expected ',' or '}'", "while parsing a flow mapping"]),
    ("duplicate_key", "rounds: 10\nproblem: {name: lasso}\nrounds: 20\n",
     [":3:1: invalid YAML: duplicate key 'rounds'"]),
    ("python_tag", "problem: !!python/object/apply:os.system ['touch {marker}']\n",
     [":1:10: invalid YAML: could not determine a constructor for the tag",
      "python/object/apply:os.system", "plain data only"]),
    ("not_a_mapping", "- fedmid\n- feddualavg\n", [": top level must be a mapping of keys, got list"]),
    # "billion laughs": 9^8 strings from a few hundred bytes; refused at the alias that
    # crosses the bound, in milliseconds, with a short message
    ("alias_bomb", "".join(f"{c}: &{c} [{', '.join([f'*{p}' if p else '0'] * 9)}]\n"
                           for p, c in zip(["", *"abcdefg"], "abcdefgh")),
     [":6:8: invalid YAML: aliases expand to more than 100,000 nodes (at alias *e)"]),
    ("recursive_alias", "problem: &p {name: lasso, more: *p}\n",
     [":1:33: invalid YAML: alias *p is inside its own anchor"]),
    ("nested_too_deeply", "rounds: " + "[" * 3000 + "]" * 3000 + "\n", [": invalid YAML: nested too deeply"]),
]


# every case checks that nothing started Ray in this process: none may be connected before
pytestmark = pytest.mark.usefixtures("ray_down")


@pytest.fixture(scope="module")
def existing_store(tmp_path_factory):
    """A tracking store that already holds an experiment with a run, and its contents."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("existing"))
    client.log_metric(run.info.run_id, "train_loss", 1.0)

    def contents():
        experiments = client.search_experiments()
        runs = client.search_runs([e.experiment_id for e in experiments])
        return sorted(e.name for e in experiments), sorted(r.info.run_id for r in runs)

    return uri, contents, contents()


def rejected(capsys, existing_store, workdir, argv, path, fragments):
    """`fco-ray argv` exits 2 with one line naming `path` and `fragments`; nothing written."""
    ray = pytest.importorskip("ray")
    code = main(argv)
    err = capsys.readouterr().err
    first_line = err.splitlines()[0]
    assert code == 2, err
    assert first_line.startswith(f"fco-ray: error: {path}")
    for fragment in fragments:
        assert fragment in first_line
    assert "Traceback" not in err
    if "Haxby" not in err:  # the missing-data message adds how to get the data
        assert err.count("\n") == 1
    uri, contents, before = existing_store
    assert contents() == before  # no experiment, no run, nothing half-written
    assert sorted(p.name for p in workdir.iterdir()) == [path.name]  # no ./mlflow.db, ./ray_results
    assert not ray.is_initialized()


@pytest.mark.parametrize("changes, fragments", [c[1:] for c in SWEEP_CASES],
                         ids=[c[0] for c in SWEEP_CASES])
def test_bad_sweep_file(capsys, existing_store, workdir, changes, fragments):
    path = workdir / "bad.yaml"
    path.write_text(yaml.safe_dump(changed({**SWEEP, "tracking": {"uri": existing_store[0]}}, changes)))
    rejected(capsys, existing_store, workdir, ["sweep", str(path)], path, fragments)


@pytest.mark.parametrize("changes, fragments", [c[1:] for c in RUN_CASES], ids=[c[0] for c in RUN_CASES])
def test_bad_run_file(capsys, existing_store, workdir, changes, fragments):
    path = workdir / "bad.yaml"
    path.write_text(yaml.safe_dump(changed({**RUN, "tracking": {"uri": existing_store[0]}}, changes)))
    rejected(capsys, existing_store, workdir, ["run", str(path)], path, fragments)


@pytest.mark.parametrize("command", ["sweep", "run"])
@pytest.mark.parametrize("text, fragments", [c[1:] for c in TEXT_CASES], ids=[c[0] for c in TEXT_CASES])
def test_file_that_is_not_yaml_data(capsys, existing_store, workdir, command, text, fragments):
    marker = workdir.parent / f"pwned-{workdir.name}"  # outside workdir: it must stay empty
    path = workdir / "bad.yaml"
    path.write_text(text.replace("{marker}", str(marker)))
    rejected(capsys, existing_store, workdir, [command, str(path)], path, fragments)
    assert not marker.exists()  # the tag was never executed


@pytest.mark.parametrize("changes, fragments", [
    ({"bogus": 1}, ["unknown top-level key(s) ['bogus']; allowed:"]),
    ({"algorithm.client_lr": -0.1}, ["algorithm.client_lr: Input should be greater than 0 (got -0.1)"]),
    ({"problem.lam": math.nan}, ["problem.lam: Input should be a finite number (got nan)"]),
    ({"algorithm.clients_per_round": 17}, ["algorithm.clients_per_round must be <= 16", "got 17"]),
    ({"problem": HAXBY_MISSING}, ["problem.path: no Haxby dataset", "/nonexistent"]),
    ({"rounds": DROP, "problem": DROP}, ["config needs both 'problem' and 'algorithm' sections"]),
    ({"rounds": True}, ["rounds: expected a number, got the boolean True"]),
    ({"problem.dim": 10**9}, ["problem 'lasso' needs about", "problem.dim=1000000000"]),
], ids=["unknown_key", "negative_rate", "nan_regularization", "clients_per_round_above_clients",
        "missing_data_path", "missing_section", "bool_for_int", "huge_dim"])
def test_bad_api_call(changes, fragments):
    with pytest.raises(ConfigError) as err:
        fco_ray.run(changed(RUN, changes))
    for fragment in fragments:
        assert fragment in str(err.value)


def test_api_reads_yaml_safely(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "run.yaml"
    path.write_text(f"problem: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError, match=r"run.yaml:1:10: invalid YAML: could not determine a constructor"):
        fco_ray.run(path)
    assert not marker.exists()


# --- safe defaults -------------------------------------------------------------------------

REPO = Path(fco_ray.__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *REPO.glob("docs/*.md"), *REPO.glob("sweeps/*.yaml"), *REPO.glob("dashboards/*.md"),
        *REPO.glob("benchmarks/*.md")]
SOURCES = [*REPO.glob("fco_ray/**/*.py"), *REPO.glob("tests/**/*.py"), *REPO.glob("benchmarks/*.py"),
           *DOCS, *REPO.glob("dashboards/*.yaml"), REPO / "pyproject.toml"]


def test_documented_servers_listen_on_localhost_only():
    """Every `mlflow ui|server` and `ray start --head` command in the docs binds 127.0.0.1, but
    for the page on several machines (docs/cluster.md), whose nodes bind their own network
    address (never 0.0.0.0: that page names it only to say which Ray sockets ignore the
    options)."""
    several = REPO / "docs" / "cluster.md"

    def commands(paths):
        return [line for path in paths for line in path.read_text().splitlines()
                # flags of one command: tokens up to a closing backtick (not the next command)
                if re.search(r"mlflow (ui|server)( [^\s`]+)* --|ray start( [^\s`]+)* --head", line)]

    local = commands([p for p in DOCS if p != several])
    assert any("mlflow ui" in c for c in local) and any("ray start" in c for c in local)
    for command in local:
        if "mlflow" in command:
            assert "--host 127.0.0.1" in command, command
        else:
            assert "--dashboard-host 127.0.0.1" in command and "--node-ip-address 127.0.0.1" in command
    remote = commands([several])
    assert remote and all("0.0.0.0" not in c for c in remote)
    for command in remote:
        if "mlflow" in command:
            assert "--host MLFLOW_HOST" in command, command
        else:
            assert "--dashboard-host HEAD_IP" in command and "--node-ip-address HEAD_IP" in command
    assert not [p for p in DOCS if p != several and "0.0.0.0" in p.read_text()]


def test_ray_token_authentication_is_never_turned_off():
    disabled = re.compile(r"RAY_AUTH_MODE['\"]?\s*[=:,]\s*['\"]?disabled", re.IGNORECASE)
    assert [p for p in SOURCES if disabled.search(p.read_text())] == []


#: the one place the package unpickles: the ray backend's driver and its own client actors
#: pass each call and its answer as one pickle over Ray's channel (as Ray itself pickles every
#: argument between its processes, inside the token-authenticated cluster); nothing read from
#: a file or a user's input. These exact statements, and no other.
TRANSPORT = {"fco_ray/backends/ray_backend.py": [
    "self.algorithm = ray.get(sent[0]) if isinstance(sent, list) else pickle.loads(sent)",
    "token, pickled, inline, ids, seed, rnd, run = pickle.loads(call)",
    "results = [pickle.loads(r) for r in self._get(calls)]"]}


def test_nothing_unpickles_or_evaluates_untrusted_data():
    """No pickle-based loader in the package but the ray backend's own transport
    (`TRANSPORT`); YAML only through a SafeLoader."""
    unsafe = re.compile(r"pickle\.loads?\(|allow_pickle\s*=\s*True|joblib\.load|torch\.load|"
                        r"dill\.|shelve\.open|marshal\.loads?\(|unsafe_load|full_load|FullLoader|"
                        r"UnsafeLoader|yaml\.Loader\b|(?<![\w.])(eval|exec)\(")
    found = [(str(p.relative_to(REPO)), line.strip())
             for p in REPO.glob("fco_ray/**/*.py")
             for line in p.read_text().splitlines() if unsafe.search(line)]
    assert sorted(found) == sorted((path, line) for path, lines in TRANSPORT.items() for line in lines)
    yaml_loads = [line for p in REPO.glob("fco_ray/**/*.py") for line in p.read_text().splitlines()
                  if re.search(r"yaml\.(load|load_all)\(", line)]
    assert all("Loader=_ConfigLoader" in line for line in yaml_loads)
    assert issubclass(_ConfigLoader, yaml.SafeLoader)


class _Payload:
    """Unpickling this runs `touch <marker>`."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_cached_optimum_file_is_never_unpickled(tmp_path, monkeypatch):
    """A planted cache file holding a pickle (E7's w* cache) is not loaded: w* is solved again."""
    monkeypatch.setenv("FCO_RAY_CACHE", str(tmp_path / "cache"))
    train, test = generate_text_nodes(seed=1, clients=6, min_samples=5, max_samples=40, dim=50,
                                      words_per_doc=6, topics=3)
    problem = SparseTextLogReg.from_nodes(train, test)
    cached = tmp_path / "cache" / "optima" / f"{data_fingerprint(problem.train, problem.lam)}.npy"
    cached.parent.mkdir(parents=True)
    marker = tmp_path / "pwned"
    np.save(cached, np.array([_Payload(marker)], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle=False"):
        np.load(cached)  # what the cache reader does: refuses the pickle
    optimum = problem.optimum
    assert not marker.exists()
    assert optimum.iterations > 0 and np.all(np.isfinite(optimum.w))  # solved, not read
    assert np.load(cached).dtype == np.float64  # the planted file was replaced by plain numbers


# --- one error path for files ----------------------------------------------------------------

def _unreadable(path: Path) -> Path:
    path.write_text("rounds: 1\n")
    path.chmod(0)
    return path


# (case id, make the file in workdir, fragments after "fco-ray: error: <path>")
FILE_CASES = [
    ("not_utf8", lambda d: (d / "bad.yaml", (d / "bad.yaml").write_bytes(b"rounds: 5\nname: \xff\xfe\n")),
     [":2: config file is not UTF-8 text (byte 0xff at offset 16)"]),
    ("directory", lambda d: (d / "bad.yaml", (d / "bad.yaml").mkdir()), [": config file is a directory, not a file"]),
    ("unreadable", lambda d: (_unreadable(d / "bad.yaml"), None),
     [": config file is not readable (permission denied)"]),
]


@pytest.mark.parametrize("command", ["sweep", "run"])
@pytest.mark.parametrize("make, fragments", [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_file_that_cannot_be_read(capsys, existing_store, workdir, command, make, fragments):
    path, _ = make(workdir)
    if "not readable" in fragments[0] and os.geteuid() == 0:
        pytest.skip("root reads any file: see test_unreadable_file_as_another_user")
    rejected(capsys, existing_store, workdir, [command, str(path)], path, fragments)


def test_unreadable_file_as_another_user(tmp_path):
    """Root reads anything, so as root the check runs in a subprocess as user `nobody`."""
    if os.geteuid() != 0:
        pytest.skip("runs as root only (test_file_that_cannot_be_read covers other users)")
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o755)
        path = _unreadable(folder / "secret.yaml")
        # imports first (the interpreter lives under /root), then drop to nobody
        code = ("import os, sys; import fco_ray.api, fco_ray.tracking; from fco_ray.cli import main; "
                "os.setgid(65534); os.setuid(65534); "
                "sys.exit(main(['run', sys.argv[1]]))")
        done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    finally:
        shutil.rmtree(folder)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"fco-ray: error: {path}: config file is not readable (permission denied)\n"


def test_missing_file(capsys, workdir):
    assert main(["run", "nosuch.yaml"]) == 2
    assert capsys.readouterr().err == "fco-ray: error: config file not found: nosuch.yaml\n"


def test_yaml_merge_keys_and_bounded_aliases_are_accepted(tmp_path):
    """`<<: *base` is valid YAML (merged keys may be overridden); aliases within the bound work."""
    path = tmp_path / "run.yaml"
    path.write_text("defaults: &lasso {name: lasso, clients: 8, dim: 16, support: 2, val_clients: 2,\n"
                    "                  samples_per_client: 8}\n")
    raw = yaml.safe_load(path.read_text())
    path.write_text(path.read_text().replace("defaults", "problem") +
                    "algorithm:\n  <<: {name: fedmid, client_lr: 0.5, clients_per_round: 4}\n"
                    "  client_lr: 0.01\nrounds: 2\neval_every: 1\n")
    df = fco_ray.run(path)
    assert df.attrs["config"]["algorithm"]["client_lr"] == 0.01  # the explicit key wins
    assert df.attrs["config"]["algorithm"]["clients_per_round"] == 4  # merged
    assert df.attrs["config"]["problem"]["dim"] == raw["defaults"]["dim"] == 16


def test_error_messages_are_bounded(tmp_path):
    """A huge value is quoted in a few dozen characters; no message exceeds ~2,000."""
    with pytest.raises(ConfigError) as err:
        fco_ray.run(changed(RUN, {"rounds": "9" * 1_000_000 + "x"}))
    assert len(str(err.value)) < 300 and str(err.value).startswith("rounds: expected a number, got the string '999")
    with pytest.raises(ConfigError) as err:
        fco_ray.run(changed(RUN, {"problem.samples_per_client": [[1] * 10**6]}))
    assert len(str(err.value)) < 2100
    assert len(str(ConfigError("x" * 10**7))) < 2100


def test_data_files_that_are_not_what_they_claim(tmp_path, capfd, monkeypatch):
    """An EMNIST "HDF5" file of text, a Haxby NIfTI of random gzip bytes: exit 2 naming the file,
    one line on the process's stderr (`capfd`: what the HDF5 and NIfTI readers' C code might
    write to file descriptor 2 counts too; in-process, where a subprocess per case paid ~2 s
    of imports)."""
    monkeypatch.chdir(tmp_path)
    emnist = tmp_path / "emnist"
    emnist.mkdir()
    for split in ("train", "test"):
        (emnist / f"fed_emnist_digitsonly_{split}.h5").write_text("not HDF5\n")
    subject = tmp_path / "haxby" / "haxby2001" / "subj1"
    subject.mkdir(parents=True)
    garbage = gzip.compress(np.random.default_rng(0).bytes(4096))
    for name in ("mask4_vt.nii.gz", "bold.nii.gz"):
        (subject / name).write_bytes(garbage)
    (subject / "labels.txt").write_text("labels chunks\nface 0\n")
    cases = [({"name": "constrained_logreg", "path": str(emnist)},
              f"{emnist}/fed_emnist_digitsonly_train.h5: EMNIST file cannot be read (OSError: "
              "Unable to synchronously open file (file signature not found)); expected an HDF5 file"),
             ({"name": "sparse_logreg", "path": str(tmp_path / "haxby"), "train_subjects": [1],
               "val_subjects": []},
              f"{subject}/mask4_vt.nii.gz: Haxby file cannot be read (ImageFileError: Cannot work "
              "out file type")]
    for problem, message in cases:
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump({**RUN, "problem": problem}))
        capfd.readouterr()
        code = main(["run", "--no-mlflow", str(path)])
        err = capfd.readouterr().err
        assert code == 2, err
        assert err.startswith(f"fco-ray: error: {path}: {message}"), err
        assert err.count("\n") == 1


def test_reading_commands_never_create_a_store(capsys, workdir, monkeypatch):
    """`report` / `runs` of nothing, and a tracking URI that is no store: exit 2, nothing created."""
    cases = [(["report", "nosuch"], "no MLflow database at "),
             (["runs", "nosuch"], "no MLflow database at "),
             (["runs", "nosuch", "--tracking-uri", "nonsense"], "tracking URI 'nonsense' is not an MLflow store URI")]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("fco-ray: error: ") and message in err and err.count("\n") == 1
    (workdir / "run.yaml").write_text(yaml.safe_dump(RUN))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nonsense")
    assert main(["run", "run.yaml"]) == 2
    assert "is not an MLflow store URI" in capsys.readouterr().err
    assert sorted(p.name for p in workdir.iterdir()) == ["run.yaml"]  # no mlflow.db, no ./nonsense


def test_storage_that_is_a_file(capsys, existing_store, workdir):
    """`--storage FILE`: exit 2 before Ray starts and before the MLflow parent run exists."""
    ray = pytest.importorskip("ray")
    path = workdir / "sweep.yaml"
    path.write_text(yaml.safe_dump({**SWEEP, "tracking": {"uri": existing_store[0]}}))
    (workdir / "storage").write_text("a file\n")
    assert main(["sweep", str(path), "--storage", str(workdir / "storage")]) == 2
    err = capsys.readouterr().err
    assert err == f"fco-ray: error: --storage {workdir / 'storage'}: not a directory\n"
    uri, contents, before = existing_store
    assert contents() == before and not ray.is_initialized()


def _plant_tune_state(storage: Path, marker: Path) -> Path:
    """A Tune experiment directory whose tuner.pkl runs `touch marker` when unpickled."""
    import pickle

    exp_dir = storage / SWEEP["name"]
    exp_dir.mkdir(parents=True)
    (exp_dir / "tuner.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    return exp_dir


@pytest.mark.parametrize("tamper, fragment", [
    (lambda d: (d / "tuner.pkl").chmod(0o666), "tuner.pkl: it is writable by other users (mode -rw-rw-rw-)"),
    (lambda d: d.chmod(0o777), f"{SWEEP['name']}: it is writable by other users (mode drwxrwxrwx)"),
    (lambda d: d.parent.chmod(0o777), "its parent directory"),
    (lambda d: os.chown(d / "tuner.pkl", 65534, 65534), "tuner.pkl: it belongs to user id 65534"),
    (lambda d: ((d / "real.pkl").write_bytes((d / "tuner.pkl").read_bytes()),
                (d / "tuner.pkl").unlink(), (d / "tuner.pkl").symlink_to(d / "real.pkl")),
     "tuner.pkl: it is a symbolic link"),
], ids=["file_world_writable", "dir_world_writable", "parent_world_writable", "other_owner", "symlink"])
def test_resume_refuses_tune_state_others_could_have_planted(capsys, existing_store, workdir, tamper, fragment):
    """`--resume` restores Tune's state by unpickling it: a planted pickle in a directory that
    another user could write is refused (exit 2), never loaded (the marker is not created)."""
    ray = pytest.importorskip("ray")
    if "65534" in fragment and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    marker = workdir.parent / f"pwned-{workdir.name}"
    path = workdir / "sweep.yaml"
    path.write_text(yaml.safe_dump({**SWEEP, "tracking": {"uri": existing_store[0]}}))
    exp_dir = _plant_tune_state(workdir / "storage", marker)
    tamper(exp_dir)
    assert main(["sweep", str(path), "--resume", "--storage", str(workdir / "storage")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fco-ray: error: --resume: refusing to load ") and fragment in err, err
    assert "only a directory that no one but you can write is trusted" in err
    assert not marker.exists() and not ray.is_initialized()
    uri, contents, before = existing_store
    assert contents() == before
