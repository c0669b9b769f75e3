"""The README is a user's guide and docs/ its pages: every relative link and image in them
resolves (the file exists; an anchor names a heading of the target page), the README stays
short with lines a terminal can show, its two quick-start commands are the ones CI runs, and
every measurement that left the README kept its place in docs/."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
SETUP = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]'"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # no headings in code
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]  # http:, mailto:


def test_slug_is_githubs():
    assert slug("E1 / E2 data and conventions") == "e1--e2-data-and-conventions"
    assert slug("Where it runs, where results go") == "where-it-runs-where-results-go"
    assert slug("`fco-ray` Configuration") == "fco-ray-configuration"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert broken == [], f"{page.relative_to(REPO)}: {broken}"


def test_the_docs_are_linked_from_their_index():
    linked = {t.partition("#")[0] for t in links(REPO / "docs" / "index.md")}
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"index.md"}
    assert pages <= linked, pages - linked


def test_the_readme_is_a_short_guide():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 220, len(lines)
    assert [i for i, line in enumerate(lines, 1) if len(line) > 200] == []
    for section in ("## Install", "## Quick start", "## Shipped sweeps", "## On a cluster",
                    "## Python API", "## Troubleshooting", "## How to cite"):
        assert section in lines, section
    # the README names no measurement history: dates and loads live in docs/
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b|load (average )?\d", "\n".join(lines))


def test_the_quick_start_is_two_commands_and_ci_runs_the_second():
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    sweep = f"{SETUP} && .venv/bin/fco-ray sweep sweeps/quickstart.yaml\n"
    tests = f"{SETUP} && .venv/bin/python -m pytest -q\n"
    assert sweep in blocks and tests in blocks
    assert tests.strip() in (REPO / ".ci" / "run").read_text().splitlines()


def test_citation_file_names_the_project_and_the_three_papers():
    cff = (REPO / "CITATION.cff").read_text()
    assert cff.startswith("cff-version: 1.2.0") and "title: fco-ray" in cff
    for title in ("Federated Composite Optimization", "Local Composite Saddle Point Optimization",
                  "Federated Optimization: Distributed Machine Learning for On-Device Intelligence"):
        assert title in cff and title in (REPO / "README.md").read_text()


def test_measurements_that_left_the_readme_are_in_the_docs():
    """A sample of the numbers the README carried before it became a guide, each in docs/
    with the file or command it came from (the command-line start-up times had no record:
    the page names the script that measures them instead)."""
    docs = "\n".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    for fact in ("benchmarks/results/test_suite.md", "benchmarks/results/peer_flower.md",
                 "benchmarks/config_errors.py", "fused_e1_grid.md", "ray_scaling_s6.md",
                 "ray_startup_lean.md", "mlflow_sweep_log.md", "e7_round_idle.md"):
        assert fact in docs, fact


@pytest.mark.parametrize("page", sorted(set((REPO / "docs").glob("*.md")) - {REPO / "docs" / "index.md"}),
                         ids=lambda p: p.name)
def test_every_docs_page_opens_with_what_a_user_does_with_it(page):
    """The first paragraph after the title and the navigation line says what the page is for
    (the measurement logs and details come below it or in benchmarks/results/)."""
    paragraphs = [p.strip() for p in page.read_text().split("\n\n")]
    prose = [p for p in paragraphs if p and not p.startswith(("#", "[Contents]"))]
    assert prose[0].startswith(("Use this page", "Read this page", "How to ")), prose[0][:120]


def test_the_readme_screenshot_is_the_quick_starts_own_experiment():
    """The MLflow UI picture the README links is the one `results/quickstart_record.py` takes of
    the quick start's own sweep (`fco-ray ui quickstart`'s link), not a test sweep's."""
    from results.quickstart_record import SCREENSHOT

    shots = re.findall(r"\[screenshot\]\((docs/images/[^)]+\.png)\)", (REPO / "README.md").read_text())
    assert shots == [str(SCREENSHOT.relative_to(REPO))] and SCREENSHOT.stat().st_size > 50_000
