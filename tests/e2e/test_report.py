"""Sweep reports: the plotted data equals the MLflow metrics; dashboards are validated.

The sweep here is written straight into a temporary SQLite store with `MlflowClient`, in the
layout `fco_ray.tracking` documents, with known series (one diverged configuration, one
algorithm whose best comes from the parent's `fco.best.*` tag and one recomputed).
"""
import csv
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from fco_ray import ConfigError
from fco_ray.report import available, find_dashboard, load_dashboard, render_report
from fco_ray.tracking.summary import short_number
from fco_ray.report.dashboard import PACKAGE_DASHBOARDS

CLIENT_LRS, SERVER_LRS, SEEDS, ROUNDS = [0.001, 0.01, 0.1], [0.3, 1.0], [0, 1], [0, 5, 10, 15]
SWEEP = {"name": "toy", "problem": {"name": "lasso", "dim": 20},
         "algorithms": ["feddualavg", "fedmid"],
         "search": {"grid": {"algorithm.client_lr": CLIENT_LRS, "algorithm.server_lr": SERVER_LRS}},
         "seeds": SEEDS, "rounds": 15, "eval_every": 5, "tune": {"metric": "f1", "mode": "max"}}


def series(alg, clr, slr, seed):
    """Known metrics per round: f1 peaks at client_lr 0.01 / server_lr 1 (fedmid: 0.001 / 1,
    lower)."""
    peak, top = (0.01, 1.0) if alg == "feddualavg" else (0.001, 0.85)
    quality = top / (1.0 + abs(np.log10(clr / peak))) * (0.6 + 0.4 * slr)
    out = []
    for r in ROUNDS:
        grow = 1 - np.exp(-r / 5)
        out.append({"f1": quality * grow + 0.01 * seed, "density": 0.5 - 0.3 * grow * quality + 0.02 * seed,
                    "train_loss": 10.0 * np.exp(-r * quality) + 0.1 + 0.05 * seed})
    return out


def diverged(alg, clr):
    return alg == "fedmid" and clr == 0.1


def make_sweep(uri, artifacts, name="toy", tag_best=True, images=(), client_lrs=CLIENT_LRS,
               server_lrs=SERVER_LRS):
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(name, artifact_location=artifacts.as_uri())
    parent = client.create_run(exp, run_name=name, tags={"fco.role": "sweep", "fco.sweep": name})
    pid = parent.info.run_id
    staged = artifacts.parent / f"{name}-sweep" / "sweep.yaml"
    staged.parent.mkdir(parents=True)
    staged.write_text(yaml.safe_dump({**SWEEP, "name": name}))
    client.log_artifact(pid, str(staged))
    runs = {}
    for alg in SWEEP["algorithms"]:
        for clr in client_lrs:
            for slr in server_lrs:
                for seed in SEEDS:
                    status = "diverged" if diverged(alg, clr) else "finished"
                    run = client.create_run(exp, run_name=f"{alg}-{clr}-{slr}-{seed}", tags={
                        "mlflow.parentRunId": pid, "fco.role": "trial", "fco.sweep": name,
                        "fco.trial_id": f"{alg}_{clr}_{slr}_{seed}", "fco.algorithm": alg,
                        "fco.status": status})
                    rid = run.info.run_id
                    params = {"problem.name": "lasso", "problem.dim": 20, "algorithm.name": alg,
                              "algorithm.client_lr": clr, "algorithm.server_lr": slr, "seed": seed,
                              "rounds": 15, "eval_every": 5}
                    rows = series(alg, clr, slr, seed)
                    if status == "diverged":
                        rows = rows[:2]  # finite rows before the blow-up
                    client.log_batch(
                        rid, params=[Param(k, v if isinstance(v, str) else json.dumps(v))
                                     for k, v in params.items()],
                        metrics=[Metric(k, v, 0, rnd) for rnd, row in zip(ROUNDS, rows)
                                 for k, v in row.items()])
                    for image in images:
                        client.log_artifact(rid, str(image))
                    runs[(alg, clr, slr, seed)] = rid
    if tag_best:
        # the sweep's recorded answer for feddualavg (recomputing gives the same config)
        client.set_tag(pid, "fco.metric", "f1")
        client.set_tag(pid, "fco.mode", "max")
        client.set_tag(pid, "fco.best.feddualavg", json.dumps(
            {"problem.name": "lasso", "problem.dim": 20, "algorithm.name": "feddualavg",
             "algorithm.client_lr": 0.01, "algorithm.server_lr": 1.0, "seed": 0, "rounds": 15,
             "eval_every": 5}))
    client.set_terminated(pid)
    return client, pid, runs


@pytest.fixture(scope="module")
def report(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    index = render_report("toy", tracking_uri=store["uri"], out_dir=out)
    return index, json.loads((out / "report.json").read_text())


def history(client, run_id, metric):
    return {m.step: m.value for m in client.get_metric_history(run_id, metric)}


def best_runs(store, alg):
    clr = 0.01 if alg == "feddualavg" else 0.001
    return {store["runs"][(alg, clr, 1.0, s)] for s in SEEDS}


def test_curves_plot_the_best_configurations_series_from_mlflow(store, report):
    index, manifest = report
    curves = {f["metric"]: index.parent / f["data"] for f in manifest["figures"] if f["kind"] == "curve"}
    # the lasso dashboard (chosen from the sweep's problem) lists precision and recall too
    assert manifest["dashboard"] == "lasso" and set(curves) == {"f1", "density", "train_loss"}
    client = store["client"]
    for metric, path in curves.items():
        data = json.loads(path.read_text())
        assert set(data["algorithms"]) == {"feddualavg", "fedmid"}
        for alg, d in data["algorithms"].items():
            assert set(d["runs"]) == best_runs(store, alg)
            per_seed = []
            for run_id, r in d["runs"].items():
                mlflow_series = history(client, run_id, metric)
                assert r["rounds"] == sorted(mlflow_series) == ROUNDS
                assert r["values"] == [mlflow_series[k] for k in ROUNDS]
                per_seed.append(r["values"])
            per_seed = np.array(per_seed)
            assert d["rounds"] == ROUNDS and d["n"] == [len(SEEDS)] * len(ROUNDS)
            np.testing.assert_allclose(d["mean"], per_seed.mean(axis=0), rtol=1e-12)
            np.testing.assert_allclose(d["std"], per_seed.std(axis=0, ddof=1), rtol=1e-12)
    assert json.loads(curves["train_loss"].read_text())["log_y"] is True
    assert json.loads(curves["f1"].read_text())["log_y"] is False


def test_heatmap_cells_are_the_final_metric_mean_over_seeds(store, report):
    index, manifest = report
    heatmaps = {f["metric"]: json.loads((index.parent / f["data"]).read_text())
                for f in manifest["figures"] if f["kind"] == "heatmap"}
    assert set(heatmaps) == {"f1", "density"}
    client = store["client"]
    for metric, data in heatmaps.items():
        assert data["x_values"] == CLIENT_LRS and data["y_values"] == SERVER_LRS
        for alg, grid in data["algorithms"].items():
            for i, slr in enumerate(SERVER_LRS):
                for j, clr in enumerate(CLIENT_LRS):
                    assert grid["seeds"][i][j] == len(SEEDS)
                    if diverged(alg, clr):
                        assert grid["status"][i][j] == "diverged" and grid["value"][i][j] is None
                        continue
                    finals = [history(client, store["runs"][(alg, clr, slr, s)], metric)[ROUNDS[-1]]
                              for s in SEEDS]
                    assert grid["status"][i][j] == "finished"
                    assert grid["value"][i][j] == pytest.approx(np.mean(finals), rel=1e-12)


def test_best_table_html_and_parent_artifacts(store, report):
    index, manifest = report
    with open(index.parent / "best.csv") as f:
        table = {row["algorithm"]: row for row in csv.DictReader(f)}
    assert float(table["feddualavg"]["algorithm.client_lr"]) == 0.01
    assert float(table["fedmid"]["algorithm.client_lr"]) == 0.001  # recomputed: no tag
    for alg, row in table.items():
        assert set(row["run_ids"].split()) == best_runs(store, alg)
        finals = [history(store["client"], r, "f1")[ROUNDS[-1]] for r in best_runs(store, alg)]
        assert float(row["f1"]) == pytest.approx(np.mean(finals))
        assert float(row["f1_std"]) == pytest.approx(np.std(finals, ddof=1))

    page = index.read_text()
    assert page.count('src="data:image/png;base64,') == len(manifest["figures"]) == 6
    # self-contained: nothing loaded from elsewhere; its only URLs link to the MLflow UI
    assert 'src="http' not in page and "@import" not in page
    from html import unescape
    from urllib.parse import parse_qs, urlsplit

    from fco_ray.tracking.links import trials_url

    base, exp = "http://127.0.0.1:5000", manifest["experiment_id"]
    by_alg = {alg: [store["runs"][k] for k in sorted(store["runs"]) if k[0] == alg] for alg in SWEEP["algorithms"]}
    hrefs = {unescape(h) for h in re.findall(r'href="([^"]*)"', page)}
    run_links = {f"{base}/#/experiments/{exp}/runs/{r}?workflowType=machine_learning"
                 for r in [store["pid"], *store["runs"].values()]}
    trials_link = trials_url(base, exp, store["pid"], "f1", "max")
    compare = {h for h in hrefs if h.startswith(f"{base}/#/compare-runs?")}
    assert hrefs == run_links | {trials_link} | compare  # the parent, every trial, two views
    compared = [set(json.loads(parse_qs(urlsplit(h.replace("#/", "")).query)["runs"][0])) for h in compare]
    assert sorted(map(sorted, compared)) == sorted(sorted(runs) for runs in by_alg.values())
    assert 'id="best-configs"' in page and "<th>f1 (ranked, max)</th>" in page
    assert '<td class="name">feddualavg</td><td>2</td><td>0.01</td><td>1</td>' in page
    assert "metric &#x27;precision&#x27;" in page  # dashboard metrics the sweep did not log

    stored = {f.path for f in store["client"].list_artifacts(store["pid"], "report")}
    local = {f"report/{p.relative_to(index.parent)}" for p in index.parent.rglob("*") if p.is_file()}
    assert local <= stored and "report/index.html" in stored


@pytest.fixture(scope="module")
def default_report(store, tmp_path_factory):
    """The toy sweep's report named by its parent run id, on the default dashboard, linking to
    an MLflow UI given by hand: its index page."""
    out = tmp_path_factory.mktemp("default-report")
    return render_report(store["pid"], tracking_uri=store["uri"], out_dir=out, dashboard="default",
                         ui_url="http://given:1")


def test_report_by_parent_run_id_default_dashboard_and_rerun(store, default_report):
    index = default_report
    manifest = json.loads((index.parent / "report.json").read_text())
    assert manifest["dashboard"] == "default" and manifest["parent_run_id"] == store["pid"]
    curves = [f["metric"] for f in manifest["figures"] if f["kind"] == "curve"]
    assert curves == ["f1", "density", "train_loss"]  # every logged metric, tuning metric first
    page = index.read_text()
    again = render_report(store["pid"], tracking_uri=store["uri"], out_dir=index.parent, dashboard="default",
                          ui_url="http://given:1")
    # the same page but for its "rendered" minute, which moves if a minute turns in between
    stamp = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
    assert len(stamp.findall(page)) == 1
    assert again == index and stamp.sub("", again.read_text()) == stamp.sub("", page)


def test_the_best_table_is_the_rankings_not_an_older_recorded_tag(store, tmp_path):
    """A parent run tagged with another best (a sweep recorded before the ranking's tie-break)
    does not change the table: it is `rank_configurations`' winner, the verdict's."""
    from fco_ray.report.data import load_sweep
    from fco_ray.tracking.queries import best_per_algorithm

    _, pid, runs = make_sweep(store["uri"], tmp_path / "mlartifacts", name="tagged", tag_best=False,
                              client_lrs=[0.001, 0.01], server_lrs=[1.0])
    older = [runs[("feddualavg", 0.001, 1.0, s)] for s in SEEDS]  # not the best final f1
    store["client"].set_tag(pid, "fco.best.feddualavg.run_ids", json.dumps(older))
    index = render_report("tagged", tracking_uri=store["uri"], out_dir=tmp_path / "out")
    with open(index.parent / "best.csv") as f:
        table = {row["algorithm"]: row for row in csv.DictReader(f)}
    ranked = best_per_algorithm(load_sweep("tagged", store["uri"]).trials, "f1", "max")
    winner = ranked[ranked["algorithm"] == "feddualavg"].iloc[0]["run_ids"]
    assert set(winner) != set(older) and set(table["feddualavg"]["run_ids"].split()) == set(winner)
    assert list(table) == ranked["algorithm"].tolist()  # best algorithm first
    f1 = json.loads((index.parent / "curve_f1.json").read_text())
    assert set(f1["algorithms"]["feddualavg"]["runs"]) == set(winner)


def test_attack_images_of_the_best_runs(store, tmp_path):
    attack = tmp_path / "attack.png"
    from fco_ray.problems.adversarial import render_attack
    render_attack(np.linspace(-0.05, 0.05, 64), attack)
    uri = store["uri"]
    make_sweep(uri, tmp_path / "mlartifacts", name="adv", images=[attack], client_lrs=[0.001, 0.01],
               server_lrs=[1.0])
    dash = tmp_path / "adv.yaml"
    dash.write_text(yaml.safe_dump({"curves": [{"metric": "f1"}], "images": ["attack.png", "missing.png"]}))
    index = render_report("adv", tracking_uri=uri, out_dir=tmp_path / "out", dashboard=dash)
    images = sorted((index.parent / "images").iterdir())
    assert [p.name for p in images] == ["feddualavg_attack.png", "fedmid_attack.png"]
    assert all(p.read_bytes() == attack.read_bytes() for p in images)
    page = index.read_text()
    assert page.count("data:image/png;base64,") == 1 + 1 + 1 + 2  # curve, grid, heatmap, two attacks
    assert "logged no artifact &#x27;missing.png&#x27;" in page


def test_a_sweep_without_trials_yet_renders_an_empty_page(store, tmp_path):
    client = store["client"]
    exp = client.create_experiment("empty", artifact_location=(tmp_path / "art").as_uri())
    client.create_run(exp, run_name="empty", tags={"fco.role": "sweep", "fco.sweep": "empty",
                                                   "fco.metric": "f1", "fco.mode": "max"})
    index = render_report("empty", tracking_uri=client.tracking_uri, out_dir=tmp_path / "out")
    page = index.read_text()
    assert "No algorithm has a finished configuration." in page and "<img" not in page
    assert "heatmap of &#x27;f1&#x27; over algorithm.client_lr x algorithm.server_lr skipped" in page


def test_unknown_sweep_and_dashboard_errors(store, tmp_path):
    with pytest.raises(ConfigError, match=r"no sweep named 'nope'.*sweeps there: \[.*'toy'.*\]"):
        render_report("nope", tracking_uri=store["uri"], out_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"unknown dashboard 'nope'; available: \[.*'lasso'"):
        render_report("toy", tracking_uri=store["uri"], out_dir=tmp_path, dashboard="nope")


@pytest.mark.parametrize("body, message", [
    ({"curves": [{"metric": "f1", "log_y": "maybe"}]}, r"curves\.0\.log_y: Value error, must be true, false or auto, got .maybe."),
    ({"curves": [{"metrc": "f1"}]}, r"unknown key .curves\.0\.metrc.; allowed keys here: \[.*.metric."),
    ({"curves": [{"metric": "f1", "ylim": [1, 0]}]}, r"ylim must be \[low, high\].*\[1\.0, 0\.0\]"),
    ({"heatmaps": [{"x": "algorithm.client_lr", "log": True}]}, r"unknown key 'heatmaps\.0\.log'; allowed keys here: \['log_color', 'metric', 'x', 'y'\]"),
    ({"metric": "f1"}, r"metric and mode go together"),
    ({"mode": "best", "metric": "f1"}, r"mode: Input should be 'min' or 'max' \(got 'best'\)"),
    ({"name": "x"}, r"unknown key 'name'; allowed keys here: \['curves', 'grid_curves', 'heatmaps'"),
    ({"curves": "some"}, r"curves: Value error, must be all or a list of {metric: ...} mappings, got 'some'"),
])
def test_bad_dashboards_name_the_key_and_value(tmp_path, body, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(body))
    with pytest.raises(ConfigError, match=message) as err:
        load_dashboard(path)
    assert str(path) in str(err.value)


def test_shipped_dashboards_are_valid_and_cover_the_problems():
    names = available()
    assert {"default", "lasso", "lowrank", "saddle", "adversarial", "svrg", "logistic"} <= set(names)
    for path in sorted(PACKAGE_DASHBOARDS.glob("*.yaml")):
        load_dashboard(path)
    for problem, expected in [("lasso", "lasso"), ("lowrank", "lowrank"), ("bilinear_l1", "saddle"),
                              ("bilinear_nuclear", "saddle"), ("adversarial", "adversarial"),
                              ("sparse_logreg", "logistic"), ("constrained_logreg", "logistic"),
                              ("mlp", "logistic"), ("sparse_text_logreg", "svrg"), ("other", "default"),
                              (None, "default")]:
        assert find_dashboard(None, problem).name == expected
    assert load_dashboard(Path(names["adversarial"])).images == ["attack.png"]


def test_grid_curves_show_every_configuration_mean_over_seeds(store, report):
    index, manifest = report
    (grid,) = [f for f in manifest["figures"] if f["kind"] == "grid"]
    assert grid["metric"] == "f1" and grid["png"] == "grid_f1.png"  # the tuning metric
    data = json.loads((index.parent / grid["data"]).read_text())
    client = store["client"]
    for alg, panel in data["algorithms"].items():
        assert panel["keys"] == ["algorithm.client_lr", "algorithm.server_lr"]
        configs = panel["configurations"]
        # every cell of the grid, sorted by client_lr then server_lr
        assert [(c["params"]["algorithm.client_lr"], c["params"]["algorithm.server_lr"]) for c in configs] \
            == [(c, s) for c in CLIENT_LRS for s in SERVER_LRS]
        assert [c["params"] for c in configs if c["best"]] == [
            {"algorithm.client_lr": 0.01 if alg == "feddualavg" else 0.001, "algorithm.server_lr": 1.0}]
        for c in configs:
            clr, slr = c["params"]["algorithm.client_lr"], c["params"]["algorithm.server_lr"]
            runs = [store["runs"][(alg, clr, slr, seed)] for seed in SEEDS]
            assert set(c["runs"]) == set(runs)
            assert c["status"] == ("diverged" if diverged(alg, clr) else "finished")
            per_seed = np.array([[history(client, r, "f1")[k] for k in c["rounds"]] for r in runs])
            assert c["rounds"] == (ROUNDS[:2] if diverged(alg, clr) else ROUNDS)
            np.testing.assert_allclose(c["mean"], per_seed.mean(axis=0), rtol=1e-12)


def test_edge_of_grid_warnings(store, report):
    """feddualavg's best (0.01, 1.0) is inside client_lr's range but at server_lr's top;
    fedmid's best (0.001, 1.0) is at the bottom of client_lr and the top of server_lr."""
    index, manifest = report
    warnings = manifest["warnings"]
    assert len(warnings) == 3
    assert any(w.startswith("fedmid: the best client_lr = 0.001 is the smallest value searched (0.001 .. 0.1)")
               and "extend search.grid.algorithm.client_lr" in w for w in warnings)
    for alg in ("feddualavg", "fedmid"):
        assert any(w.startswith(f"{alg}: the best server_lr = 1 is the largest value searched (0.3 .. 1)")
                   and "may lie above it" in w for w in warnings)
    assert not any(w.startswith("feddualavg: the best client_lr") for w in warnings)
    page = index.read_text()
    assert '<ul class="warnings" id="warnings">' in page and page.index("Warnings") < page.index("best-configs")


def test_links_to_every_run_in_the_mlflow_ui(store, default_report, monkeypatch):
    from fco_ray.report import ui_base

    monkeypatch.delenv("FCO_RAY_MLFLOW_UI", raising=False)
    assert ui_base("sqlite:///x.db") == "http://127.0.0.1:5000"
    assert ui_base("http://mlflow.lab:8080/") == "http://mlflow.lab:8080"  # the server is the UI
    monkeypatch.setenv("FCO_RAY_MLFLOW_UI", "http://ui.lab:5001")
    assert ui_base("sqlite:///x.db") == "http://ui.lab:5001"
    assert ui_base("sqlite:///x.db", "http://given:1/") == "http://given:1"
    page = default_report.read_text()
    exp = store["client"].get_run(store["pid"]).info.experiment_id
    for run_id in [store["pid"], *store["runs"].values()]:  # the parent and every trial
        assert f'href="http://given:1/#/experiments/{exp}/runs/{run_id}?workflowType=machine_learning"' in page
    # the trials table: one row per trial, in the ranking's order: configurations by their
    # mean final f1 over seeds (best first), a configuration's runs together
    rows = re.findall(r'<tr><td class="name">([a-z]+)</td>.*?runs/([0-9a-f]{32})\?workflowType=machine_learning">open</a>', page)
    assert len(rows) == len(store["runs"]) and len({r for _, r in rows}) == len(store["runs"])
    config = {r: k[:3] for k, r in store["runs"].items()}
    fdavg = list(dict.fromkeys(config[r] for alg, r in rows if alg == "feddualavg"))
    means = [np.mean([history(store["client"], store["runs"][(*c, s)], "f1")[ROUNDS[-1]] for s in SEEDS])
             for c in fdavg]
    assert means == sorted(means, reverse=True)
    assert json.loads((default_report.parent / "report.json").read_text())["mlflow_ui"] == "http://given:1"


def test_rerendering_with_another_dashboard_leaves_no_stale_files(store, report, tmp_path):
    out = tmp_path / "out"
    (tmp_path / "mine.txt").write_text("not ours")
    # the files of a first render on the lasso dashboard: the module's report's, copied
    shutil.copytree(report[0].parent, out)
    first = out / "index.html"
    assert (out / "curve_density.png").is_file()
    dash = tmp_path / "small.yaml"
    dash.write_text(yaml.safe_dump({"curves": [{"metric": "train_loss"}], "heatmaps": []}))
    (out / "notes.txt").write_text("the user's own file")
    again = render_report("toy", tracking_uri=store["uri"], out_dir=out, dashboard=dash)
    assert again == first
    manifest = json.loads((out / "report.json").read_text())
    local = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert local == set(manifest["files"]) | {"notes.txt"}  # a file we did not write stays
    assert "curve_density.png" not in local and "heatmap_f1.png" not in local
    assert set(manifest["files"]) == {"index.html", "report.json", "best.csv", "curve_train_loss.png",
                                      "curve_train_loss.json", "grid_f1.png", "grid_f1.json"}
    stored = {f.path for f in store["client"].list_artifacts(store["pid"], "report")}
    assert stored == {f"report/{f}" for f in manifest["files"]}  # the parent run's too
    assert (tmp_path / "mine.txt").read_text() == "not ours"


# --- a real sweep: fco-ray sweep renders the report at its end ---------------------------

REAL_SWEEP = {
    "name": "real", "problem": {"name": "lasso", "dim": 20, "clients": 8, "samples_per_client": 16,
                                "support": 4, "val_clients": 2},
    "algorithms": ["feddualavg", "fedmid"],
    "algorithm": {"local_steps": 3, "batch_size": 4, "clients_per_round": 4},
    # client_lr 1e4 diverges: a hatched column in the heatmaps
    "search": {"grid": {"algorithm.client_lr": [0.01, 1.0e4], "algorithm.server_lr": [1.0]}},
    "seeds": [0, 1], "rounds": 12, "eval_every": 4, "tune": {"metric": "f1", "mode": "max"},
    "report": "lasso"}


@pytest.fixture(scope="module")
def real_sweep(tmp_path_factory, ray_cluster):
    from fco_ray.sweep import run_sweep

    root = tmp_path_factory.mktemp("real_sweep")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    path = root / "real.yaml"
    path.write_text(yaml.safe_dump({**REAL_SWEEP, "tracking": {"uri": uri}}))
    cwd = Path.cwd()
    os.chdir(root)  # the automatic report goes to ./reports/<sweep>
    try:
        outcome = run_sweep(path, storage=root / "ray_results", echo=lambda line: None)
    finally:
        os.chdir(cwd)
    return {"uri": uri, "outcome": outcome, "index": root / "reports" / "real" / "index.html"}


@pytest.mark.ray
def test_real_sweep_report_matches_mlflow(real_sweep):
    index, outcome = real_sweep["index"], real_sweep["outcome"]
    assert outcome.ok and index.is_file()  # rendered by run_sweep itself
    client = MlflowClient(tracking_uri=real_sweep["uri"])
    parent = client.get_run(outcome.parent_run_id)
    runs = client.search_runs([outcome.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    by_config = {}
    for r in runs:
        key = (r.data.tags["fco.algorithm"], float(r.data.params["algorithm.client_lr"]))
        by_config.setdefault(key, []).append(r)
    manifest = json.loads((index.parent / "report.json").read_text())
    assert manifest["parent_run_id"] == parent.info.run_id and manifest["dashboard"] == "lasso"

    f1 = json.loads((index.parent / "curve_f1.json").read_text())
    assert set(f1["algorithms"]) == {"feddualavg", "fedmid"}
    for alg, d in f1["algorithms"].items():
        assert set(d["runs"]) == set(json.loads(parent.data.tags[f"fco.best.{alg}.run_ids"]))
        values = np.array([[m.value for m in sorted(client.get_metric_history(run, "f1"),
                                                     key=lambda m: m.step)] for run in d["runs"]])
        assert d["rounds"] == [0, 4, 8, 12]
        np.testing.assert_allclose(d["mean"], values.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(d["std"], values.std(axis=0, ddof=1), rtol=1e-12, atol=1e-15)

    for metric in ("f1", "density"):
        heat = json.loads((index.parent / f"heatmap_{metric}.json").read_text())
        assert heat["x_values"] == [0.01, 1.0e4] and heat["y_values"] == [1.0]
        for alg, grid in heat["algorithms"].items():
            for j, clr in enumerate(heat["x_values"]):
                trials = by_config[(alg, clr)]
                statuses = {r.data.tags["fco.status"] for r in trials}
                if clr == 1.0e4:
                    assert statuses == {"diverged"} and grid["status"][0][j] == "diverged"
                    assert grid["value"][0][j] is None
                else:
                    assert statuses == {"finished"} and grid["status"][0][j] == "finished"
                    finals = [r.data.metrics[metric] for r in trials]
                    assert grid["value"][0][j] == pytest.approx(np.mean(finals), rel=1e-12)
    stored = {f.path for f in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/index.html", "report/curve_f1.png", "report/heatmap_f1.png"} <= stored


@pytest.mark.ray
def test_real_sweep_child_runs_carry_names_summaries_and_models(real_sweep, tmp_path):
    """What the MLflow UI shows of each trial: a readable name, the ranked metric's best.* and
    mean.* summaries (no other: the chart view stays the curves), the final model as
    model.npz; the experiment opens in the model-training view."""
    import fco_ray
    from fco_ray.tracking.store import flatten

    outcome = real_sweep["outcome"]
    client = MlflowClient(tracking_uri=real_sweep["uri"])
    assert client.get_experiment(outcome.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs([outcome.experiment_id], f"tags.`mlflow.parentRunId` = '{outcome.parent_run_id}'")
    assert len(runs) == 8
    for r in runs:
        p = r.data.params
        alg, clr, slr, seed = p["algorithm.name"], float(p["algorithm.client_lr"]), float(p["algorithm.server_lr"]), int(p["seed"])
        assert r.info.run_name == f"{alg} {short_number(clr)}/{short_number(slr)} s{seed}"
        f1 = [m.value for m in sorted(client.get_metric_history(r.info.run_id, "f1"), key=lambda m: m.step)]
        artifacts = {f.path for f in client.list_artifacts(r.info.run_id)}
        if r.data.tags["fco.status"] == "diverged":
            assert "model.npz" not in artifacts  # no finite model to keep
            continue
        # the ranked metric's summaries only (the chart view stays the curves: docs/sweeps.md)
        assert r.data.metrics["f1"] == f1[-1]
        assert r.data.metrics["mean.f1"] == pytest.approx(sum(f1) / len(f1))
        assert {k for k in r.data.metrics if k.startswith(("final.", "best.", "mean."))} == {"mean.f1"}
        assert artifacts == {"model.npz"}
        config = {**REAL_SWEEP["problem"]}
        _, expected = fco_ray.run({"problem": config, "algorithm": {**REAL_SWEEP["algorithm"], "name": alg,
                                                                    "client_lr": clr, "server_lr": slr},
                                   "rounds": REAL_SWEEP["rounds"], "eval_every": REAL_SWEEP["eval_every"],
                                   "seed": seed}, return_model=True)
        path = client.download_artifacts(r.info.run_id, "model.npz", str(tmp_path))
        with np.load(path, allow_pickle=False) as saved:
            assert set(saved.files) == set(expected)
            for k in expected:  # a fused trial's arithmetic may differ in the last bit
                np.testing.assert_allclose(saved[k], expected[k], rtol=1e-12, atol=1e-15)
    assert flatten({"a": {"b": 1}}) == {"a.b": 1}


def test_e6_trial_artifacts_hold_the_model_and_the_attack_image(tmp_path):
    import fco_ray
    from fco_ray.api import resolve
    from fco_ray.tracking.runs import write_artifacts

    config = {"problem": {"name": "adversarial", "clients": 10}, "rounds": 5, "eval_every": 5,
              "algorithm": {"name": "feddualex", "client_lr": 0.05, "clients_per_round": 5}}
    df, model = fco_ray.run(config, return_model=True)
    written = write_artifacts(resolve(config), model, tmp_path)
    assert [p.name for p in written] == ["model.npz", "attack.png"]
    assert (tmp_path / "attack.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with np.load(tmp_path / "model.npz", allow_pickle=False) as saved:
        np.testing.assert_array_equal(saved["delta"], model["delta"])
        assert saved["delta"].shape == (64,)


@pytest.mark.ray
def test_cli_report_and_its_errors(real_sweep, tmp_path, capsys):
    from fco_ray.cli import main

    out = tmp_path / "again"
    assert main(["report", "real", "--tracking-uri", real_sweep["uri"], "--out", str(out),
                 "--dashboard", "default"]) == 0
    assert f"report: {out / 'index.html'}" in capsys.readouterr().out
    assert json.loads((out / "report.json").read_text())["dashboard"] == "default"
    assert main(["report", "nope", "--tracking-uri", real_sweep["uri"]]) == 2
    assert "no sweep named 'nope'" in capsys.readouterr().err
    assert main(["report", "real", "--tracking-uri", real_sweep["uri"], "--dashboard", "nope"]) == 2


def test_grid_cells_with_a_hyperparameter_only_some_algorithms_have():
    """A searched key that one algorithm lacks is NaN in its rows; cells must still form."""
    from fco_ray.report.data import grid_cells

    rows = pd.DataFrame({"lr": [1, 1, 2], "slr": [1, 1, 1], "passes": [np.nan, np.nan, 3.0],
                         "status": ["finished"] * 3, "loss": [1.0, 2.0, 3.0],
                         "run_id": ["a", "b", "c"]})
    cells = grid_cells(rows, "lr", "slr", "loss", "loss", "min", ["passes"])
    assert cells["value"].tolist() == [1.5, 3.0]
    assert cells["seeds"].tolist() == [2, 1]


def test_page_title_verdict_and_trials_follow_the_one_ranking(store, report):
    """The page's title claims no paper experiment the sweep did not run (dim 20 is not E1's
    setting), it shows the verdict `fco-ray sweep` prints, and its "All trials" table lists
    the runs in the ranking's order (`run_ranks`: the verdict's and the MLflow link's)."""
    from html import unescape

    from fco_ray.report.data import load_sweep
    from fco_ray.tracking.queries import run_ranks

    index, _ = report
    page = unescape(index.read_text())
    assert "<h1>Sweep toy: Federated LASSO: support recovery</h1>" in page
    assert "E1" not in page.split("</h1>")[0]
    verdict = page.split('<pre id="verdict">')[1].split("</pre>")[0].splitlines()
    assert verdict[0].startswith("verdict: feddualavg wins on final f1: ")
    assert any(line.startswith("  not the setting of Fig. 3") for line in verdict)
    trials = load_sweep("toy", store["uri"]).trials
    ranks = run_ranks(trials, "f1", "max")
    listed = re.findall(r"/runs/([0-9a-f]{32})\?workflowType", page.split("<h2>All trials</h2>")[1])
    assert listed == sorted(ranks, key=ranks.get)
