"""`fco-ray` exit codes and messages: 0 success, 2 invalid input, 1 anything else."""
import pytest
import yaml

from fco_ray.cli import main
from fco_ray.tracking import Store, filter_tags

RUN = {"problem": {"name": "lasso", "clients": 8, "dim": 16, "support": 4, "val_clients": 2,
                   "samples_per_client": 16},
       "algorithm": {"name": "feddualavg", "client_lr": 0.001, "clients_per_round": 4},
       "rounds": 10, "eval_every": 5}


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(RUN))
    sweep = {"name": "s", "problem": RUN["problem"], "algorithms": ["fedmid"],
             "algorithm": {"clients_per_round": 4},  # of the 8 clients
             "search": {"grid": {"algorithm.client_lr": [0.001, -0.1]}}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    return tmp_path


def call(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_prints_metrics_and_logs_one_mlflow_run(files, capsys):
    code, out, err = call(capsys, "run", "run.yaml")
    assert code == 0 and "status: finished" in out
    assert out.splitlines()[0].split()[:2] == ["round", "train_loss"] and len(out.splitlines()) >= 4
    store = Store()  # the default: sqlite:///<cwd>/mlflow.db
    assert store.uri == f"sqlite:///{files / 'mlflow.db'}"
    exp = store.experiment_id("fco-ray", create=False)
    (run,) = store.search(exp, filter_tags(**{"fco.role": "run"}))
    assert run.data.tags["fco.status"] == "finished" and run.data.params["algorithm.client_lr"] == "0.001"
    assert [m.step for m in store.client.get_metric_history(run.info.run_id, "f1")] == [0, 5, 10]
    assert call(capsys, "run", "run.yaml", "--no-mlflow", "--set", "rounds=5")[0] == 0
    assert len(store.search(exp, "")) == 1


@pytest.mark.parametrize("argv, message", [
    (["run", "run.yaml", "--set", "algorithm.client_rate=0.1"], "unknown key 'algorithm.client_rate'"),
    (["run", "run.yaml", "--set", "algorithm.client_lr=-1"], "algorithm.client_lr: Input should be greater than 0"),
    (["run", "missing.yaml"], "config file not found: missing.yaml"),
    (["run", "run.yaml", "--set", "rounds"], "--set expects key.path=value, got 'rounds'"),
    (["run", "sweep.yaml"], "sweep.yaml is a sweep file"),
    (["sweep", "sweep.yaml"], "trial (algorithm.name=fedmid, seed=0, algorithm.client_lr=-0.1)"),
    (["sweep", "missing.yaml"], "config file not found"),
    (["sweep", "sweep.yaml", "--set", "tune.mode=maximize"], "tune.mode: Input should be 'min' or 'max'"),
    (["runs", "nothing"], "no MLflow database at "),
])
def test_invalid_input_exits_2_with_one_line(files, capsys, argv, message):
    code, out, err = call(capsys, *argv)
    assert code == 2 and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_resume_without_state_is_invalid_input(files, capsys):
    (files / "sweep.yaml").write_text((files / "sweep.yaml").read_text().replace("-0.1", "0.01"))
    code, _, err = call(capsys, "sweep", "sweep.yaml", "--resume")
    assert code == 2 and "no sweep state to resume" in err


def test_argparse_errors_and_other_failures(files, capsys):
    assert call(capsys, "frobnicate")[0] == 2
    assert call(capsys, "run")[0] == 2
    # a tracking store that cannot be opened is not a config problem: exit code 1
    code, _, err = call(capsys, "run", "run.yaml", "--set", "tracking.uri=sqlite:////proc/no/mlflow.db")
    assert code == 1 and err.startswith("fco-ray: error: ") and err.count("\n") == 1
    # a URI that names no MLflow store at all is one (it would become a directory)
    code, _, err = call(capsys, "run", "run.yaml", "--set", "tracking.uri=nosuchscheme://x")
    assert code == 2 and "tracking.uri: tracking URI 'nosuchscheme://x' is not an MLflow store URI" in err
