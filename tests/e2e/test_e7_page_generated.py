"""results/e7.md's numbers come from its records through results/generate.py: every region of the
page is one generate.py sees (and --check compares), a hand edit inside one is written back, a
changed record changes the page, and a table of numbers outside the regions stands only in a
section that says it has no record.
"""
import json
import re
import shutil
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "results" / "e7.md"
NO_RECORD = "Not generated: no record kept"


def test_every_marker_on_the_pages_is_one_generate_sees(generate):
    """A region closed by another marker (`<!-- /generated: NAME -->`) would escape --check."""
    for page in generate.PAGES:
        text = page.read_text()
        opened = re.findall(r"(?<!`)<!-- generated: ([\w.-]+) -->", text)  # not quoted in prose
        assert opened == generate.regions(text), page
        assert not re.search(r"(?<!`)<!-- /generated: ", text), page


def test_the_e7_page_regions_are_its_records(generate):
    names = generate.regions(PAGE.read_text())
    assert {"e7_calibrated", "e7.uncalibrated_10k", "e7.uncalibrated_10k_claims",
            "e7.uncalibrated_300", "e7.uncalibrated_300_claims"} <= set(names)
    assert generate.differences([PAGE]) == []


def test_a_hand_edited_e7_number_is_written_back(generate):
    text = PAGE.read_text()
    for old, new in (("reaches OPT + 0.01 at round 68", "reaches OPT + 0.01 at round 30"),
                     ("| 0.0148 |", "| 0.0100 |"), ("a factor ~6.2 per 100 rounds", "a factor ~6.5 per 100 rounds"),
                     ("| 0.2722 | 0.2752 | 0.2626 |", "| 0.2722 | 0.2752 | 0.2627 |")):
        assert old in text, old
        edited = text.replace(old, new, 1)
        assert generate.render(edited, PAGE) == text, old


def test_a_changed_record_changes_the_e7_page(generate, tmp_path, monkeypatch):
    from results import e7_page

    for name in ("e7_fig2_10k.jsonl", "e7_fig2_10k_300.jsonl", "e7_gd_3000.jsonl", "e7_fig2_50rounds.jsonl"):
        shutil.copy(ROOT / "results" / name, tmp_path / name)
    before = {n: generate.BLOCKS[n]() for n in ("e7.uncalibrated_10k_claims", "e7.uncalibrated_300",
                                                 "e7.uncalibrated_10k_earlier")}
    lines = [json.loads(s) for s in (tmp_path / "e7_gd_3000.jsonl").read_text().splitlines()]
    lines[-1]["suboptimality"][-1] = 0.0123  # GD's f - f* at round 3000 (recorded: 0.0148)
    (tmp_path / "e7_gd_3000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    lines = [json.loads(s) for s in (tmp_path / "e7_fig2_10k.jsonl").read_text().splitlines()]
    fsvrg = next(r for r in lines if r.get("algorithm") == "fsvrg" and r.get("h") == 300.0)
    fsvrg["test_error"] = [e - 0.05 for e in fsvrg["test_error"]]  # reaches OPT + 0.01 much sooner
    (tmp_path / "e7_fig2_10k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    monkeypatch.setattr(e7_page, "RESULTS", tmp_path)
    after = {n: generate.BLOCKS[n]() for n in before}
    assert "| f - f* | " in after["e7.uncalibrated_300"] and "| 0.0123 |" in after["e7.uncalibrated_300"]
    assert "at round 68" in before["e7.uncalibrated_10k_claims"]
    assert "at round 68 (test error" not in after["e7.uncalibrated_10k_claims"]
    assert "9 agree" in before["e7.uncalibrated_10k_earlier"]
    assert "8 agree" in after["e7.uncalibrated_10k_earlier"]  # the edited run no longer matches


def test_numbers_outside_the_regions_stand_only_where_the_page_says_no_record(generate):
    """A table row with a number outside every region lies in a section marked as having no
    record (the runs whose output was not kept)."""
    outside = generate.REGION.sub("", PAGE.read_text())
    for section in re.split(r"\n(?=## )", outside):
        rows = [line for line in section.splitlines() if re.match(r"^\|.*\d", line)]
        if rows:
            assert NO_RECORD in section, (section.splitlines()[0], rows[:2])
