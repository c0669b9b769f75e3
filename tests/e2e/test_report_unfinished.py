"""`fco-ray report` on a sweep that has not finished (its MLflow parent run still RUNNING, or
ended KILLED by Ctrl-C / SIGTERM) says so: on stdout, on the page and in report.json, the
numbers are partial."""
import json

import pytest

from fco_ray.cli import main
from tests.e2e.test_report import make_sweep


@pytest.mark.parametrize("status, says", [("RUNNING", "still running"), ("KILLED", "did not finish")])
def test_a_report_of_an_unfinished_sweep_says_it_is_partial(tmp_path, capsys, status, says):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client, pid, _ = make_sweep(uri, tmp_path / "mlartifacts", client_lrs=[0.01], server_lrs=[1.0])
    client.update_run(pid, status)
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["report", "toy", "--tracking-uri", uri, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"sweep toy {says}" in printed and "partial" in printed, printed
    manifest = json.loads((out / "report.json").read_text())
    assert manifest["finished"] is False and manifest["parent_status"] == status
    assert any(f"sweep toy {says}" in w and "partial" in w for w in manifest["warnings"])
    assert f"sweep toy {says}" in (out / "index.html").read_text()


def test_a_report_of_a_finished_sweep_says_nothing_of_it(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    make_sweep(uri, tmp_path / "mlartifacts", client_lrs=[0.01], server_lrs=[1.0])
    out = tmp_path / "out"
    assert main(["report", "toy", "--tracking-uri", uri, "--out", str(out)]) == 0
    assert "partial" not in capsys.readouterr().out
    manifest = json.loads((out / "report.json").read_text())
    assert manifest["finished"] is True and not any("partial" in w for w in manifest["warnings"])
