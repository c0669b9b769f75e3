"""docs/results.md's E1 / E2 data conventions come from results/conventions.json, the record of
results/conventions.py: the record holds the settings the script measures (the E1 sweep file's),
a changed record changes the page's text, and the script's --quick smoke run still works."""
import copy
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from results.pages import conventions
from tests.helpers import recorded_files

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    return importlib.import_module(f"results.{name}")


def flat(text: str) -> str:
    """A paragraph on one line (the pages wrap it)."""
    return " ".join(text.split())


@pytest.fixture(scope="module")
def record():
    return json.loads((ROOT / "results" / "conventions.json").read_text())


def test_the_record_is_a_full_run_at_the_scripts_and_the_sweep_files_settings(record):
    script = load("conventions")
    sweep = yaml.safe_load((ROOT / "sweeps" / "e1_lasso.yaml").read_text())
    assert record["quick"] is False and record["command"] == "python results/conventions.py"
    for exp, scan in script.LAM_SCAN.items():
        got = record["lam_scan"][exp]
        assert (got["lams"], got["values"], got["key"]) == (scan["lams"], scan["values"], scan["key"]), exp
        assert len(got["rows"]) == len(scan["lams"]) * len(scan["values"]) * len(script.SEEDS), exp
    # the page calls the first scanned size the package's default (E1 support, E2 rank)
    from fco_ray.problems import LassoParams, LowRankParams

    assert script.LAM_SCAN["e1"]["values"][0] == LassoParams.model_fields["support"].default
    assert script.LAM_SCAN["e2"]["values"][0] == LowRankParams.model_fields["rank"].default
    shift = record["shift"]
    assert shift["config"]["algorithm"] == sweep["algorithm"], "rerun: python results/conventions.py"
    assert shift["algorithms"] == sweep["algorithms"] and shift["seeds"] == script.SEEDS
    assert shift["config"]["rounds"] == script.SHIFT_ROUNDS
    expected = sum(len(rates) * len(shifts) for rates, shifts in script.SHIFT_GRIDS)
    assert len(shift["rows"]) == expected * len(sweep["algorithms"]) * len(script.SERVER_RATES) * len(script.SEEDS)


def test_a_changed_record_changes_the_paragraphs(record):
    """The text follows the record: one more diverged run at shift 0.25 moves the boundary, a
    seed of E1 support 8 short of F1 = 1 at lam 0.1 leaves no scanned lam that recovers."""
    before = flat(conventions.results_shift(record))
    assert "finishes all 24 runs at `shift = 0.1` and `shift = 0.25`" in before
    changed = copy.deepcopy(record)
    row = next(r for r in changed["shift"]["rows"] if r["shift"] == 0.25 and r["algorithm"] == "fedmid")
    row.update(status="diverged", last_round=100)
    after = flat(conventions.results_shift(changed))
    assert "finishes all 24 runs at `shift = 0.1`;" in after
    assert "diverges in 1 of 24 at `shift = 0.25` (ended by round 120): FedMiD at server rate" in after
    assert "is the largest shift tried at which every run finished, a factor 2.5 below" in after

    assert "E1 `lam = 0.1` (support F1 = 1 for supports 512, 64 and 8;" in flat(conventions.results_conventions(record))
    row = next(r for r in changed["lam_scan"]["e1"]["rows"] if r["lam"] == 0.1 and r["truth"] == 8)
    row["f1"] = 0.9
    assert "E1: no scanned `lam` recovers the truth everywhere" in flat(conventions.results_conventions(changed))


@pytest.mark.slow
def test_the_quick_run_writes_a_record_the_page_is_written_from(tmp_path):
    results = recorded_files(ROOT / "results")
    done = subprocess.run([sys.executable, str(ROOT / "results" / "conventions.py"), "--quick", "--out",
                           str(tmp_path / "rec")], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert recorded_files(ROOT / "results") == results
    quick = json.loads((tmp_path / "rec" / "conventions.json").read_text())
    assert quick["quick"] is True and quick["shift"]["config"]["rounds"] < 100
    assert "`python results/conventions.py --quick`" in flat(conventions.results_conventions(quick))
    assert "**Client heterogeneity" in conventions.results_shift(quick)
