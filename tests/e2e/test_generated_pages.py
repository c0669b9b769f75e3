"""Every generated region of the results and docs pages is what results/generate.py writes from
the record (results/*.csv and the scripts' outputs): a number typed by hand into a region, or a
record changed without regenerating the pages, fails here.
"""
import re
from pathlib import Path

import pandas as pd
import pytest

from results.pages import common, e1_variants, e5

ROOT = Path(__file__).resolve().parents[2]


def test_every_generated_region_matches_its_record(generate):
    stale = generate.differences()
    assert stale == [], f"regenerate with: python results/generate.py ({stale})"


def test_every_block_is_used_and_every_region_names_a_block(generate):
    used = {name for page in generate.PAGES for name in generate.regions(page.read_text())}
    assert used == set(generate.BLOCKS), (used ^ set(generate.BLOCKS))
    # the pages that quote run numbers are converted
    for page in ("results/e1.md", "results/e1_variants.md", "results/e5_full_scale.md", "docs/results.md",
                 "README.md"):
        assert generate.regions((ROOT / page).read_text()), page


def test_a_hand_edited_number_is_found_and_rewritten(generate, tmp_path):
    page = ROOT / "results" / "e1.md"
    text = page.read_text()
    edited = text.replace("at 19 of its 29 stable rate pairs", "at 22 of its 29 stable rate pairs", 1)
    assert edited != text
    assert generate.render(edited, page) == text  # the generator writes the record's number back
    with pytest.raises(SystemExit, match="unknown generated block 'nope'"):
        generate.render("<!-- generated: nope -->\nx\n<!-- /generated -->\n", page)


def test_the_quoted_e1_counts_are_the_csvs(generate):
    """The counts the review found misquoted: F1 exactly 1 on every seed at 19 pairs (E1),
    19 / 19 / 17 at the variants; F1 >= 0.99 at 22 (E1) and 23 / 19 / 20."""
    e1 = pd.read_csv(ROOT / "results" / "e1_trials.csv")
    grid = common.Grid(e1)
    assert int(grid.pairs("feddualavg")["exact"].sum()) == 19
    assert int(grid.pairs("feddualavg")["near"].sum()) == 22
    exact = [int(e1_variants.variant_grid(v).pairs("feddualavg")["exact"].sum()) for v in e1_variants.SETTINGS]
    assert exact == [19, 19, 17]
    for page in ("results/e1.md", "docs/results.md"):
        text = (ROOT / page).read_text()
        assert "at 19 of its 29 stable rate pairs (F1 >= 0.99 at 22)" in text
        assert not re.search(r"F1 1\.000 ± 0\.000 with density 0\.500 .{0,40}at 22 of its 29", text)
    quick = (ROOT / "docs" / "results.md").read_text()
    assert "FedMiD's best is F1 0.80 at density 0.75" not in quick


def test_every_table_of_the_e5_page_and_every_claim_row_is_generated(generate):
    """results/e5_full_scale.md's tables (and docs/results.md's claim rows) hold numbers from
    runs: each table line lies inside a generated region, none is typed by hand."""
    for page, rows in (("results/e5_full_scale.md", r"^\|.*\d"), ("docs/results.md", r"^\| E\d: ")):
        text = (ROOT / page).read_text()
        outside = generate.REGION.sub("", text)
        typed = [line for line in outside.splitlines() if re.match(rows, line)]
        assert typed == [], (page, typed[:3])


def test_a_changed_e5_record_changes_the_page(generate, monkeypatch):
    """The E5 page reads its CSVs: a changed best gap in the record shows up in the region."""
    before = generate.BLOCKS["e5.rankings"]()
    load = e5.rankings().load

    def halved(files):
        t = load(files)
        t.loc[t["algorithm"] == "feddualex", "duality_gap"] /= 2
        return t
    monkeypatch.setattr(e5.rankings(), "load", halved)
    after = generate.BLOCKS["e5.rankings"]()
    assert before != after
    assert "| feddualex | 0.03, 0.3 | 0.0538 |" in after  # 0.1076 / 2 at K = 10 on seed 0


def test_benchmark_figures_are_written_from_their_records(generate):
    """docs/benchmarks.md's sections on the quick start, the command line, E7, the backends and
    MLflow carry no timing or ratio outside a generated region (each region reads its record in
    benchmarks/results/)."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    for heading in ("## Command-line start-up", "## The quick start", "## E7 at the paper's scale",
                    "## Ray and local backends", "## MLflow store"):
        start = text.index(heading)
        section = text[start:text.find("\n## ", start + 1)]
        assert "<!-- generated: " in section or heading == "## Command-line start-up", heading
        typed = re.findall(r"\d+(?:\.\d+)?\s?(?:ms|s|x|MiB)\b", generate.REGION.sub("", section))
        assert typed == [], (heading, typed)
