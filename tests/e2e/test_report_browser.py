"""The sweep report and the MLflow UI in headless Chromium (Debian's `chromium`).

The sweep is written by fco-ray's own MLflow layer (`tracking.SweepLog`, as a Tune driver
would) with known series. A static server (python's http.server, 127.0.0.1, a free port)
serves the rendered report; `mlflow server` serves the same tracking store. Chromium loads
both: the report page must show every figure (inline PNG), the best-configuration table
and live links to the runs; the MLflow UI must open the sweep's trials in its
model-training view (not GenAI), one row per trial with a name that shows both rates, in the
sweep's ranking (the verdict's winner first), open the experiment and a run's page in that
view too, render the parent run with the report among its artifacts, and the compare view.
Screenshots go to pytest's tmp_path; with FCO_RAY_UPDATE_SCREENSHOTS=1 they are also copied
to dashboards/screenshots/ (the report) and docs/images/ (the MLflow UI; the committed ones
were made so).
"""
import base64
import functools
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.helpers import end_process_group

from fco_ray.report import render_report
from fco_ray.report.figures import PALETTE
from fco_ray.tracking.links import compare_url, experiment_url, run_url, trials_url
from fco_ray.tracking.store import Store
from fco_ray.tracking.summary import run_label
from fco_ray.tracking.sweeps import SweepLog
from tests.e2e.test_report import (
    CLIENT_LRS,
    ROUNDS,
    SEEDS,
    SERVER_LRS,
    SWEEP,
    diverged,
    series,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow,  # servers and a browser: minutes on a busy 2-core machine
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                 "(.ci/run installs it: apt-get install chromium)")]
SERVER_START_TIMEOUT = 180  # seconds; mlflow server imports a lot (slow on a busy 2-core box)
SCREENSHOTS = Path(__file__).resolve().parents[2] / "dashboards" / "screenshots"
DOC_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"  # the MLflow UI, for docs/sweeps.md


def keep(shot: Path, name: str) -> None:
    """Copy a screenshot into the repository when asked to (FCO_RAY_UPDATE_SCREENSHOTS=1)."""
    if os.environ.get("FCO_RAY_UPDATE_SCREENSHOTS") == "1":
        shutil.copy(shot, (DOC_IMAGES if name.startswith("mlflow_") else SCREENSHOTS) / name)


def logged_sweep(uri: str) -> dict:
    """The toy sweep of tests/e2e/test_report.py, logged through `SweepLog` as a sweep's Tune
    driver logs it (names, summary metrics, the experiment's kind tag, best tags)."""
    log = SweepLog(Store(uri), "toy", "toy", "f1", "max", yaml.safe_dump(SWEEP), resume=False)
    names = {}
    for alg in SWEEP["algorithms"]:
        for clr in CLIENT_LRS:
            for slr in SERVER_LRS:
                for seed in SEEDS:
                    trial = f"{alg}_{clr}_{slr}_{seed}"
                    config = {"problem": SWEEP["problem"], "algorithm": {"name": alg, "client_lr": clr,
                              "server_lr": slr}, "rounds": 15, "eval_every": 5, "seed": seed}
                    log.start(trial, config, run_label(config))
                    rows = series(alg, clr, slr, seed)[:2 if diverged(alg, clr) else None]
                    for rnd, row in zip(ROUNDS, rows):
                        log.add_row(trial, {"round": rnd, **row})
                    log.end(trial, "diverged" if diverged(alg, clr) else "finished")
                    names[log.runs[trial].info.run_id] = run_label(config)
    log.finish(failed=False)
    return {"pid": log.parent_id, "experiment": log.experiment_id, "names": names,
            "client": log.store.client}


def chromium(profile: Path, url: str, *action: str) -> str:
    """Run headless Chromium on `url` with its actions (--dump-dom, --screenshot=FILE, or both:
    one page load for the DOM and the picture)."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--window-size=1280,2000", *action, url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page(HTMLParser):
    """The bits of a DOM the tests look at: images, and the best-configuration table's cells."""

    def __init__(self):
        super().__init__()
        self.images, self.rows, self._in_table, self._cell = [], [], False, None
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a":
            self.links.append(attrs.get("href"))
        if tag == "img":
            self.images.append(attrs)
        elif tag == "table" and attrs.get("id") == "best-configs":
            self._in_table = True
        elif self._in_table and tag == "tr":
            self.rows.append([])
        elif self._in_table and tag in ("td", "th"):
            self._cell = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(self._cell)
            self._cell = None
        elif tag == "table":
            self._in_table = False


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    db = root / "mlflow.db"
    uri = f"sqlite:///{db}"
    sweep = logged_sweep(uri)
    port = free_port()
    # start the MLflow server first: it takes longest; own session so it and its workers stop together
    mlflow = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=open(root / "mlflow.log", "w"), stderr=subprocess.STDOUT, start_new_session=True,
        # no job runner: it forks more processes that import mlflow (GenAI jobs are not used here)
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    report = root / "report"
    index = render_report("toy", tracking_uri=uri, out_dir=report, ui_url=f"http://127.0.0.1:{port}")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(report))
    handler.log_message = lambda *args: None
    static = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=static.serve_forever, daemon=True).start()
    try:
        yield {"index": index, "report_url": f"http://127.0.0.1:{static.server_port}/index.html",
               "mlflow": mlflow, "mlflow_url": f"http://127.0.0.1:{port}", "log": root / "mlflow.log",
               **sweep}
    finally:
        static.shutdown()
        end_process_group(mlflow)


def test_report_page_shows_figures_and_best_table(served, tmp_path):
    index = served["index"]
    page = Page()
    page.feed(chromium(tmp_path / "profile", served["report_url"], "--dump-dom"))
    pngs = sorted(p for p in index.parent.glob("*.png"))
    assert len(pngs) == 6 and len(page.images) == len(pngs)
    shown = [base64.b64decode(img["src"].removeprefix("data:image/png;base64,")) for img in page.images]
    assert all(img["src"].startswith("data:image/png;base64,") for img in page.images)
    assert sorted(shown) == sorted(p.read_bytes() for p in pngs)  # every figure, as rendered
    header, *rows = page.rows
    assert header[:4] == ["algorithm", "seeds", "algorithm.client_lr", "algorithm.server_lr"]
    assert header[4] == "f1 (ranked, max)"
    assert [r[:4] for r in rows] == [["feddualavg", "2", "0.01", "1"], ["fedmid", "2", "0.001", "1"]]
    assert header[-1] == "MLflow runs" and [r[-1] for r in rows] == ["run 1run 2"] * 2
    # every trial links to its run in the MLflow UI being served
    base, exp = served["mlflow_url"], served["experiment"]
    for run_id in served["names"]:
        assert run_url(base, exp, run_id) in page.links
    assert "warnings" in page.ids and "trials" in page.ids

    shot = tmp_path / "report.png"
    chromium(tmp_path / "profile", served["report_url"], f"--screenshot={shot}")
    keep(shot, "report_toy.png")
    from matplotlib.image import imread
    pixels = (imread(shot)[..., :3] * 255).round()
    assert pixels.shape[:2] == (2000, 1280)
    for color in PALETTE[:2]:  # both algorithms' curves are drawn on screen
        rgb = np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)])
        assert (np.abs(pixels - rgb).sum(axis=-1) < 12).sum() > 200, color


def wait_for(url: str, mlflow: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        assert mlflow.poll() is None, f"mlflow server exited: {log.read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"mlflow server did not answer {url} within {SERVER_START_TIMEOUT} s")


def test_mlflow_ui_shows_the_report_artifact(served, tmp_path):
    base = served["mlflow_url"]
    wait_for(f"{base}/health", served["mlflow"], served["log"])
    # the server hands out the attached report, byte for byte
    with urllib.request.urlopen(f"{base}/get-artifact?path=report/index.html&run_uuid={served['pid']}") as r:
        assert r.read() == served["index"].read_bytes()
    # the UI (a React app) renders the parent run's artifact view with the report selected
    url = f"{base}/#/experiments/{served['experiment']}/runs/{served['pid']}/artifacts/report/index.html"
    budget = "--virtual-time-budget=10000"  # let the app fetch and render before the DOM is read
    dom = chromium(tmp_path / "profile", url, budget, "--dump-dom")
    assert 'id="root"' in dom and "mlflow-ui-container" in dom
    assert "toy" in dom and "report/index.html" in dom and "sweep.yaml" in dom
    shot = tmp_path / "mlflow_ui.png"
    chromium(tmp_path / "profile", url, budget, "--window-size=1280,1000", f"--screenshot={shot}")
    assert shot.stat().st_size > 20_000
    keep(shot, "mlflow_ui_report_artifact.png")


def test_mlflow_ui_shows_the_trials_in_the_training_view(served, tmp_path):
    """The link fco-ray prints after a sweep (and the report's "MLflow trials"): the sweep's
    chart view in the model-training view: every trial in the run list under a name that
    shows both rates, in the sweep's own ranking (tag fco.rank: the verdict's winner first,
    ties broken as the verdict breaks them), and the per-round curves as charts, no one-point
    `best.*` chart before them (only the ranked metric's `mean.*`, the tie-break, is logged)."""
    base, exp = served["mlflow_url"], served["experiment"]
    wait_for(f"{base}/health", served["mlflow"], served["log"])
    budget = "--virtual-time-budget=20000"
    url = trials_url(base, exp, served["pid"], "f1", "max")
    assert "compareRunsMode=CHART" in url
    shot = tmp_path / "mlflow_trials.png"
    dom = chromium(tmp_path / "profile", url, budget, "--window-size=1600,1200", "--dump-dom",
                   f"--screenshot={shot}")
    assert "Detect Issues" not in dom and "Model training" in dom
    assert "matching runs" in dom and "Model metrics" in dom  # the chart view's metric section
    # its charts: the toy's curves and the ranked metric's tie-break, nothing else
    children = served["client"].search_runs([exp], f"tags.`mlflow.parentRunId` = '{served['pid']}'")
    assert {k for r in children for k in r.data.metrics} == {"f1", "density", "train_loss", "mean.f1"}
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))
    assert re.search(r"Model metrics \( ?4 ?\)", text), text[text.find("Model metrics") - 100:][:400]
    assert "Sort: fco.rank" in text
    shown = re.findall(r">((?:feddualavg|fedmid) [0-9.e-]+/[0-9.e-]+ s[01])<", dom)
    assert sorted(shown) == sorted(served["names"].values())  # every trial, the parent not
    # the list is the sweep's ranking, run for run; the verdict's winner (feddualavg at
    # 0.01 / 1, both seeds) first
    rank = {served["names"][r.info.run_id]: r.data.tags["fco.rank"] for r in children}
    assert shown == sorted(shown, key=rank.get)
    assert shown[:2] == ["feddualavg 0.01/1 s0", "feddualavg 0.01/1 s1"]
    assert shot.stat().st_size > 20_000
    keep(shot, "mlflow_ui_trials.png")


def test_mlflow_experiment_and_run_pages_open_in_the_training_view(served, tmp_path):
    """MLflow 3.17 opens `#/experiments/<id>` in its GenAI view on a fresh browser (the
    experiment tag `mlflow.experimentKind` is not read while its GenAI / Model training
    switch exists): fco-ray's links carry `workflowType=machine_learning`, which opens the
    runs table, and a run's page under "Runs" of the model-training view, not under the
    GenAI view's "Evaluation runs"."""
    base, exp = served["mlflow_url"], served["experiment"]
    wait_for(f"{base}/health", served["mlflow"], served["log"])
    budget = "--virtual-time-budget=20000"

    def page(url: str, profile: str, shot: str | None = None) -> str:
        """The page's text (and, given `shot`, its picture from the same load, kept as `shot`)."""
        picture = [f"--screenshot={tmp_path / shot}"] if shot else []
        dom = chromium(tmp_path / profile, url, budget, "--window-size=1600,1000", "--dump-dom", *picture)
        if shot:
            assert (tmp_path / shot).stat().st_size > 20_000
            keep(tmp_path / shot, shot)
        return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))

    genai_nav = "Evaluation runs"  # an entry of the GenAI view's side bar
    plain = page(f"{base}/#/experiments/{exp}", "plain")
    assert genai_nav in plain or "Detect Issues" in plain  # MLflow's default, without the link's parameter
    runs = page(experiment_url(base, exp), "experiment", "mlflow_ui_experiment.png")
    assert genai_nav not in runs and "Model registry" in runs and "matching runs" in runs
    winner = served["client"].search_runs([exp], f"tags.`fco.rank` = '0001'")[0].info.run_id
    plain_run = page(f"{base}/#/experiments/{exp}/runs/{winner}", "plain_run")
    assert genai_nav in plain_run
    run = page(run_url(base, exp, winner), "run", "mlflow_ui_run.png")
    assert genai_nav not in run and "Model registry" in run
    assert served["names"][winner] in run and "mean.f1" in run


def test_mlflow_compare_view_of_an_algorithms_trials(served, tmp_path):
    base, exp = served["mlflow_url"], served["experiment"]
    wait_for(f"{base}/health", served["mlflow"], served["log"])
    runs = [r for r, name in served["names"].items() if name.startswith("feddualavg")]
    url = compare_url(base, exp, runs)
    budget = "--virtual-time-budget=15000"
    shot = tmp_path / "mlflow_compare.png"
    dom = chromium(tmp_path / "profile", url, budget, "--window-size=1400,1400", "--dump-dom",
                   f"--screenshot={shot}")
    assert f"Comparing {len(runs)} Runs from 1 Experiment" in dom
    assert "Parallel Coordinates Plot" in dom and "algorithm.client_lr" in dom
    keep(shot, "mlflow_ui_compare.png")
