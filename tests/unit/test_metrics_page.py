"""docs/metrics.md defines every metric a shipped problem reports, and names the problems
that have it; the CLI's --help links the page."""
import re
from pathlib import Path

import pytest

from fco_ray.cli import build_parser
from fco_ray.problems.registry import PROBLEMS, build_problem

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
SMALL = {"lasso": {"dim": 16, "support": 4, "clients": 4, "samples_per_client": 8},
         "lowrank": {"dim": 4, "rank": 2, "clients": 4, "samples_per_client": 8},
         "sparse_text_logreg": {"clients": 20, "min_samples": 5, "max_samples": 20, "dim": 200},
         "bilinear_l1": {"n": 6, "m": 8, "clients": 4},
         "bilinear_nuclear": {"n": 6, "m": 6, "rank": 2, "clients": 4},
         "sparse_logreg": {"dataset": "synthetic_fmri"}}


def rows() -> dict[str, str]:
    """Each metric named in the first cell of a table row -> that row."""
    out = {}
    for line in PAGE.read_text().splitlines():
        if line.startswith("| `"):
            for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
                out[name] = line
    return out


#: the shipped problems (tests in the same process may register problems of their own)
SHIPPED = sorted(n for n, spec in PROBLEMS.items()
                 if n != "custom" and spec.build.__module__.startswith("fco_ray."))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_metric_of_every_problem_is_defined_with_its_problem(name):
    problem = build_problem(PROBLEMS[name].params(name=name, **SMALL.get(name, {})), 0)
    defined = rows()
    for metric in problem.metric_names():
        assert metric in defined, f"{metric} ({name}) is not defined in docs/metrics.md"
        row = defined[metric]
        assert row.count("|") == 3 or f"`{name}`" in row, f"docs/metrics.md: {metric} does not name {name}"
    for metric in ("round", "floats_up", "floats_down"):  # every run, from the engine
        assert metric in defined


def test_the_cli_help_links_the_page():
    assert "docs/metrics.md" in build_parser().format_help()
