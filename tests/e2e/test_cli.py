"""`fco-ray` exit codes and messages: 0 success, 2 invalid input, 1 anything else."""
import ast

import pytest
import yaml

from fco_ray.cli import main
from fco_ray.tracking.store import Store, filter_tags

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
    # readable name, summary metrics (MLflow's runs table columns), the training-view tag
    assert run.info.run_name == "feddualavg 0.001/1 s0 lasso"
    f1 = [m.value for m in store.client.get_metric_history(run.info.run_id, "f1")]
    loss = [m.value for m in store.client.get_metric_history(run.info.run_id, "train_loss")]
    # a single run has no ranked metric: no summary metrics (MLflow's latest value is the final one)
    assert run.data.metrics["f1"] == f1[-1] and run.data.metrics["train_loss"] == loss[-1]
    assert not [k for k in run.data.metrics if k.startswith(("final.", "best.", "mean."))]
    assert store.client.get_experiment(exp).tags["mlflow.experimentKind"] == "custom_model_development"
    # progress on stderr (stdout keeps the table), and where to look next
    assert "round 10/10 (100%)" in err and "rounds/s" in err and "train_loss=" in err
    assert f"--backend-store-uri sqlite:///{files / 'mlflow.db'} --host 127.0.0.1" in out
    assert f"open http://127.0.0.1:5000/#/experiments/{exp}/runs/{run.info.run_id}" in out
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


def test_version(capsys):
    import fco_ray

    assert call(capsys, "--version") == (0, f"fco-ray {fco_ray.__version__}\n", "")


HEAVY = ["ray", "mlflow", "matplotlib", "numba", "sklearn", "pandas", "scipy", "jax"]


@pytest.mark.parametrize("argv, heavy_allowed", [
    (["run", "nosuch.yaml"], []),
    (["sweep", "nosuch.yaml"], []),
    (["run", "broken.yaml"], []),
    (["run", "sweep.yaml"], []),
    (["run", "run.yaml", "--set", "rounds"], []),
    (["runs", "nothing"], []),
    (["--version"], []),
    # key and value errors need the algorithm and problem registries: their schemas only
    (["run", "run.yaml", "--set", "algorithm.client_rate=0.1"], []),
    (["run", "run.yaml", "--set", "algorithm.client_lr=-1"], []),
    (["run", "run.yaml", "--set", "algorithm.client_lr=0.0l"], []),
    (["run", "run.yaml", "--set", "problem.dim=0"], []),
    (["sweep", "sweep.yaml"], []),  # client_lr -0.1 in the grid
    (["sweep", "sweep.yaml", "--set", "algorithms=[fedmid, nosuch]"], []),
])
def test_errors_come_before_heavy_imports(files, argv, heavy_allowed):
    """What makes errors appear in about a second: no heavy module is imported before the
    input is checked (README "Sweeps" has the times before and after)."""
    import subprocess
    import sys

    (files / "broken.yaml").write_text("rounds: [1, 2\n")
    code = ("import sys; from fco_ray.cli import main\n"
            f"rc = main({argv!r})\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
            "raise SystemExit(rc)")
    done = subprocess.run([sys.executable, "-c", code], cwd=files, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode in (0, 2), done.stderr
    assert "--set" not in argv[2:-1] or done.returncode == 2, done.stderr
    loaded = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert set(loaded) <= set(heavy_allowed), (argv, loaded)


def test_example_run_config_runs(files, capsys):
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "run_lasso.yaml"
    code, out, err = call(capsys, "run", str(example), "--no-mlflow", "--set", "rounds=20",
                          "--set", "eval_every=10")
    assert code == 0 and "status: finished" in out and "round 20/20 (100%)" in err


def test_progress_lines_rate_and_eta():
    import io

    from fco_ray.tracking.progress import Progress, duration

    now = [100.0]
    stream = io.StringIO()
    progress = Progress(1000, ["f1"], label="fedmid lr=0.01", every=2.0, stream=stream,
                        clock=lambda: now[0])
    progress({"round": 0, "f1": 0.0, "train_loss": 9.0})         # shown: the first row
    now[0] += 1.0
    progress({"round": 100, "f1": 0.25})                         # within 2 s: not shown
    now[0] += 1.5
    progress({"round": 250, "f1": 0.5})                          # 250 rounds in 2.5 s
    now[0] += 7.5
    progress({"round": 1000, "f1": 0.75})                        # the last row: always shown
    lines = stream.getvalue().splitlines()
    assert lines == ["fedmid lr=0.01: round 0/1000 (0%), - rounds/s, ETA ?, f1=0",
                     "fedmid lr=0.01: round 250/1000 (25%), 100 rounds/s, ETA 8 s, f1=0.5",
                     "fedmid lr=0.01: round 1000/1000 (100%), 100 rounds/s, ETA 0 s, f1=0.75"]
    assert [duration(s) for s in (5, 185, 7620)] == ["5 s", "3 min 05 s", "2 h 07 min"]


def test_best_table_does_not_repeat_the_ranked_metric_as_score():
    import pandas as pd

    from fco_ray.cli import _best_table

    best = pd.DataFrame([{"algorithm": "fedmid", "score": 0.9, "seeds": [0, 1], "run_ids": ["a", "b"],
                          "algorithm.client_lr": 0.01, "algorithm.server_lr": 1.0, "f1": 0.9,
                          "density": 0.1, "train_loss": 3.0}])
    best.attrs.update(params=["algorithm.client_lr", "algorithm.server_lr"],
                      metrics=["density", "f1", "train_loss"])
    table = _best_table(best, "f1")
    assert list(table.columns) == ["algorithm", "client_lr", "server_lr", "seeds", "f1", "density", "train_loss"]


def test_the_python_api_logs_a_run_exactly_as_fco_ray_run_does(files, capsys):
    """`fco_ray.run(config, tracking=True)` and `fco-ray run` go through one tracking layer:
    the same params, tags, metric histories (values and steps) and artifacts."""
    import fco_ray

    assert call(capsys, "run", "run.yaml")[0] == 0
    df = fco_ray.run(RUN, tracking=True)
    store = Store()
    exp = store.experiment_id("fco-ray", create=False)
    cli_run, api_run = sorted(store.search(exp, filter_tags(**{"fco.role": "run"})),
                              key=lambda r: r.info.start_time)
    assert api_run.info.run_id == df.attrs["mlflow_run_id"] and df.attrs["mlflow_uri"] == store.uri
    assert api_run.data.params == cli_run.data.params
    assert api_run.info.run_name == cli_run.info.run_name
    assert {k: v for k, v in api_run.data.tags.items() if not k.startswith("mlflow.")} == \
        {k: v for k, v in cli_run.data.tags.items() if not k.startswith("mlflow.")}
    assert api_run.data.metrics == cli_run.data.metrics
    for metric in cli_run.data.metrics:
        history = [(m.step, m.value) for m in store.client.get_metric_history(cli_run.info.run_id, metric)]
        assert [(m.step, m.value) for m in store.client.get_metric_history(api_run.info.run_id, metric)] == history
    listed = sorted(a.path for a in store.client.list_artifacts(cli_run.info.run_id))
    assert listed and sorted(a.path for a in store.client.list_artifacts(api_run.info.run_id)) == listed


@pytest.mark.parametrize("value, says, never", [
    ("0.0l", "got the string '0.0l' (not a number: 'l' after the number '0.0')", "quotes"),
    ("1e-3x", "(not a number: 'x' after the number '1e-3')", "quotes"),
    ("abc", "got the string 'abc' (not a number)", "quotes"),
    ('"0.01"', "got the string '0.01' (text is never taken as a number: write the number "
               "without quotes)", "not a number"),
])
def test_text_where_a_number_belongs_says_what_is_wrong_with_it(files, capsys, value, says, never):
    """Quotes are blamed only where there were quotes around a number; other text is named
    with where it stops being a number."""
    code, out, err = call(capsys, "run", "run.yaml", "--no-mlflow", "--set", f"algorithm.client_lr={value}")
    assert code == 2 and err.count("\n") == 1, err
    assert "algorithm.client_lr: expected a number" in err and says in err and never not in err, err
