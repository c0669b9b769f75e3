"""The sweep report and the MLflow UI in headless Chromium (Debian's `chromium`).

A static server (python's http.server, 127.0.0.1, a free port) serves the rendered report;
`mlflow server` serves the same tracking store. Chromium loads both: the report page must
show every figure (inline PNG) and the best-configuration table, and the MLflow UI must
render the sweep's parent run with the report among its artifacts. Screenshots are kept
under pytest's tmp_path.
"""
import base64
import functools
import os
import shutil
import signal
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

from fco_ray.report import render_report
from fco_ray.report.figures import PALETTE
from tests.test_report import make_sweep

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                "(.ci/run installs it: apt-get install chromium)")
SERVER_START_TIMEOUT = 180  # seconds; mlflow server imports a lot (slow on a busy 2-core box)


def chromium(profile: Path, url: str, *action: str) -> str:
    """Run headless Chromium on `url` with one action (--dump-dom or --screenshot=FILE)."""
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

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
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
    client, pid, _ = make_sweep(uri, root / "mlartifacts")
    port = free_port()
    # start the MLflow server first: it takes longest; own session so it and its workers stop together
    mlflow = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=open(root / "mlflow.log", "w"), stderr=subprocess.STDOUT, start_new_session=True,
        # no job runner: it forks more processes that import mlflow (GenAI jobs are not used here)
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    report = root / "report"
    index = render_report("toy", tracking_uri=uri, out_dir=report)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(report))
    handler.log_message = lambda *args: None
    static = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=static.serve_forever, daemon=True).start()
    try:
        yield {"index": index, "report_url": f"http://127.0.0.1:{static.server_port}/index.html",
               "mlflow": mlflow, "mlflow_url": f"http://127.0.0.1:{port}", "log": root / "mlflow.log",
               "client": client, "pid": pid, "experiment": client.get_run(pid).info.experiment_id}
    finally:
        static.shutdown()
        os.killpg(mlflow.pid, signal.SIGTERM)
        try:
            mlflow.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(mlflow.pid, signal.SIGKILL)
            mlflow.wait()


def test_report_page_shows_figures_and_best_table(served, tmp_path):
    index = served["index"]
    page = Page()
    page.feed(chromium(tmp_path / "profile", served["report_url"], "--dump-dom"))
    pngs = sorted(p for p in index.parent.glob("*.png"))
    assert len(pngs) == 5 and len(page.images) == len(pngs)
    shown = [base64.b64decode(img["src"].removeprefix("data:image/png;base64,")) for img in page.images]
    assert all(img["src"].startswith("data:image/png;base64,") for img in page.images)
    assert sorted(shown) == sorted(p.read_bytes() for p in pngs)  # every figure, as rendered
    header, *rows = page.rows
    assert header[:4] == ["algorithm", "seeds", "algorithm.client_lr", "algorithm.server_lr"]
    assert header[4] == "f1 (ranked, max)"
    assert [r[:4] for r in rows] == [["feddualavg", "2", "0.01", "1"], ["fedmid", "2", "0.001", "1"]]

    shot = tmp_path / "report.png"
    chromium(tmp_path / "profile", served["report_url"], f"--screenshot={shot}")
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
