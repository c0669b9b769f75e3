"""results/e7_calibration.py and e7_fig2.py --set: a bad key or value exits 2 with a
message naming it, before any data are generated; the page region is rewritten in place."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def call(script, *args, cwd):
    return subprocess.run([sys.executable, str(ROOT / "results" / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, message", [
    (["--set", "problem.positive_share=1.5"], "problem.positive_share: Input should be less than 1"),
    (["--set", "problem.topic_signal=-1"], "problem.topic_signal: Input should be greater than or equal to 0"),
    (["--set", "problem.bogus=1"], "unknown key 'problem.bogus'"),
    (["--set", "clients=3"], "--set takes problem.KEY=VALUE, got 'clients=3'"),
    (["--set", "problem.test_fraction=0"], "problem.test_fraction > 0"),
    (["--clients", "0"], "--clients must be >= 1, got 0"),
])
def test_calibration_rejects_bad_values_with_exit_2(tmp_path, args, message):
    done = call("e7_calibration.py", *args, "--out", str(tmp_path / "s"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "s.json").exists()


def test_fig2_set_rejects_bad_values_with_exit_2(tmp_path):
    done = call("e7_fig2.py", "--set", "problem.author_bias=-2", "--out", str(tmp_path / "r.jsonl"),
                cwd=tmp_path)
    assert done.returncode == 2 and "problem.author_bias: Input should be greater than or equal to 0" in done.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_render_rewrites_only_the_marked_region(tmp_path):
    record = {"kind": "e7_statistics", "record": "s.json", "command": "x", "settings": {"clients": 2},
              "runs": [{"seed": 0, "majority_error": 0.3316, "author_majority_error": 0.2,
                        "optimum_error": 0.25, "rare_feature_share": 0.5, "n": 10, "test_n": 2,
                        "nnz": 20, "nodes": 2, "d": 5}]}
    (tmp_path / "s.json").write_text(json.dumps(record))
    rows = {"round": [1, 2], "train_loss": [1.0, 0.9], "suboptimality": [0.2, 0.1], "test_error": [0.3, 0.26]}
    lines = [{"kind": "problem", "n": 10, "nnz": 20, "nodes": 2, "d": 5, "opt": 0.5,
              "opt_grad_norm": 1e-10, "opt_test_error": 0.25},
             {"kind": "run", "key": ["gd", 1.0, False], "algorithm": "gd", "h": 1.0, "status": "finished",
              "seconds": 1.0, "group": 1, "rounds": 2, **rows}]
    (tmp_path / "f.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")
    page = tmp_path / "page.md"
    page.write_text("before\n<!-- generated: e7_calibrated -->\nold\n<!-- /generated -->\nafter\n")
    done = call("e7_calibration.py", "--render-only", "--out", str(tmp_path / "s"), "--page", str(page),
                "--fig2", str(tmp_path / "f.jsonl"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert text.startswith("before\n<!-- generated: e7_calibrated -->\n") and text.endswith(
        "<!-- /generated -->\nafter\n")
    assert "old" not in text
    # the 10% column: 0.3316 and 0.25 are within, 0.2 (vs 0.1714) and 0.5 (vs 0.88) are not
    assert "| predicting -1 (the majority class), error | 0.3316 | 0.3316 | 1 of 1 |" in text
    assert "| per-author majority, test error | 0.1714 | 0.2000 | 0 of 1 |" in text
    assert "| optimum w*, test error | 0.2627 | 0.2500 | 1 of 1 |" in text
    assert "| GD | 1 | 2 | > 2 |" in text  # OPT + 0.01 at round 2, OPT + 0.002 never
    page.write_text("no region\n")
    done = call("e7_calibration.py", "--render-only", "--out", str(tmp_path / "s"), "--page", str(page),
                "--fig2", str(tmp_path / "f.jsonl"), cwd=tmp_path)
    assert done.returncode == 2 and "needs one <!-- generated: e7_calibrated -->" in done.stderr


@pytest.mark.parametrize("stem", ["e7_statistics", "e7_statistics_10k", "e7_statistics_uncalibrated"])
def test_the_recorded_pages_are_what_their_records_give(tmp_path, stem):
    """results/e7.md's calibrated region and the statistics pages, redrawn from the records
    in results/, equal the committed pages (no number on them is edited by hand)."""
    import shutil
    results = ROOT / "results"
    shutil.copy(results / f"{stem}.json", tmp_path / "s.json")
    args = ["--render-only", "--out", str(tmp_path / "s")]
    if stem == "e7_statistics":
        shutil.copy(results / "e7.md", tmp_path / "e7.md")
        args += ["--page", str(tmp_path / "e7.md"), "--fig2", str(results / "e7_fig2_calibrated.jsonl")]
    done = call("e7_calibration.py", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "s.md").read_text() == (results / f"{stem}.md").read_text()
    if stem == "e7_statistics":
        assert (tmp_path / "e7.md").read_text() == (results / "e7.md").read_text()
