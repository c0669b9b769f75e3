"""`fco-ray ui`: starts the MLflow UI on the store, waits until it answers, then prints the
link (the sweep's trials when a sweep is named); the server here is a stand-in that answers
after a delay and exits, so the test takes seconds, not MLflow's start-up."""
import subprocess
import sys

import pytest

from fco_ray import cli

# answers one request, then exits (the command waits for the server's end): the command's first
# try (at once) finds nothing listening, its second (1 s later, its polling interval) the answer
STAND_IN = """
import http.server, sys, time
time.sleep(0.5)  # not answering yet: the command must wait
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler)
server.handle_request()
server.server_close()
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_waits_until_the_server_answers_then_prints_the_link(tmp_path, monkeypatch, capsys):
    (tmp_path / "mlflow.db").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", raising=False)
    started, envs = [], []
    real = subprocess.Popen

    def popen(command, **kw):
        started.append(command)
        envs.append(kw.get("env") or {})
        return real([sys.executable, "-c", STAND_IN, command[command.index("--port") + 1]], **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(cli, "_existing_store", lambda uri: f"sqlite:///{tmp_path / 'mlflow.db'}")
    port = free_port()
    assert cli.main(["ui", "--port", str(port)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert started[0][1:] == ["-m", "mlflow", "ui", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
                              "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    assert envs[0]["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"  # no job runner: it doubles the start
    assert out[0].startswith(f"starting the MLflow UI on sqlite:///") and "busy machine" in out[0]
    assert out[1].startswith("the MLflow UI answers (after ") and out[2] == f"  http://127.0.0.1:{port}"


def test_wait_gives_up_when_the_server_exits_or_never_answers():
    now = iter(range(100))
    tick = lambda: float(next(now))  # noqa: E731
    assert cli.wait_until_answers("http://127.0.0.1:9/", lambda: False, 60, clock=tick) is None
    now = iter(range(100))
    assert cli.wait_until_answers("http://127.0.0.1:9/", lambda: True, 5, clock=tick, sleep=lambda s: None) is None


@pytest.mark.parametrize("argv, message", [(["ui", "--port", "0"], "--port: expected a port number"),
                                           (["ui", "bad name!"], "no sweep can be named")])
def test_ui_input_errors_exit_2(argv, message, tmp_path, monkeypatch, capsys):
    (tmp_path / "mlflow.db").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "_existing_store", lambda uri: "sqlite:///x.db")
    assert cli.main(argv) == 2 and message in capsys.readouterr().err
