"""results/e3_synthetic.md and e4_synthetic.md are what results/synthetic_fmri.py writes from
their recorded CSVs and run notes: no number on them is edited by hand. A trial run of the
script (two configurations' worth of rounds) writes records and a page that agree."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]


def script():
    from results import synthetic_fmri

    return synthetic_fmri


@pytest.mark.parametrize("exp", ["e3", "e4"])
def test_page_is_generated_from_the_records(exp):
    page = REPO / "results" / f"{exp}_synthetic.md"
    assert page.read_text() == script().page_text(exp), \
        f"{page.name} differs from its records: run python results/synthetic_fmri.py {exp} --page"


@pytest.mark.parametrize("exp", ["e3", "e4"])
def test_records_hold_every_configuration_of_the_sweep_files(exp):
    from fco_ray.sweep.checks import load_sweep

    module = script()
    trials = pd.read_csv(REPO / "results" / f"{exp}_synthetic_trials.csv")
    expected = sum(load_sweep(REPO / path, overrides).num_trials()
                   for _, path, overrides in module.EXPERIMENTS[exp]["runs"])
    assert len(trials) == expected
    assert set(trials["seed"]) == {0, 1, 2}


@pytest.mark.slow
def test_a_trial_run_writes_records_and_a_page(tmp_path):
    """The whole path on E4's sweep files cut to 2 rounds and one seed: every configuration
    recorded, every server model feasible, the page written from the records."""
    module = script()
    assert module.main(["e4", "--set", "rounds=2", "--set", "seeds=[0]", "--out", str(tmp_path)]) == 0
    trials = pd.read_csv(tmp_path / "e4_synthetic_trials.csv")
    assert len(trials) == 3 * 4 * 4  # 3 problems x 4 methods x 4 client rates
    assert (trials["evaluated_rounds"] == 3).all() and (trials["finite_objective_rounds"] == 3).all()
    page = (tmp_path / "e4_synthetic.md").read_text()
    assert page == module.page_text("e4", tmp_path)
    assert "--set rounds=2" in page and "**holds** for every run that finished" in page
