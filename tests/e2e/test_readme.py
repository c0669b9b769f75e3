"""The Python examples of the README and of docs/problems.md (a custom problem) run as
written and print what they promise."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def python_blocks() -> list[str]:
    """The README's three API examples, then the custom problem of docs/problems.md."""
    return [*re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S),
            *re.findall(r"```python\n(.*?)```", (REPO / "docs" / "problems.md").read_text(), re.S)]


def test_the_readme_has_its_python_examples():
    blocks = python_blocks()
    assert len(blocks) == 4
    assert "return_model=True" in blocks[1] and "run_grid" in blocks[2]
    assert "class MeanEstimation(Problem)" in blocks[3]


@pytest.mark.parametrize("index, expected", [
    (0, r"round\s+train_loss\s+f1\s+density\s+val_mse[\s\S]*\n\d+\s+100\s[\s\S]*\nfinished\n$"),
    (1, r"^\d+ [01]\.\d+ /\S+/model\.npz\n$"),
    (2, r"algorithm.client_lr\s+algorithm.server_lr\s*\n0\.001\s+0\.3\s+[0-9.]+\n[\s\S]*"
        r"0\.010\s+0\.3\s+[0-9.]+\n\s+1\.0\s+[0-9.]+\nName: f1"),
    (3, r"round\s+train_loss\n\s+80 [\s\S]*\n\s*100 [\s\S]*\nw = \[[-0-9. ]+\]\n$"),
])
def test_readme_python_example_runs_and_prints(tmp_path, index, expected):
    code = python_blocks()[index]
    if index in (1, 2):  # continuations of the first example: its imports
        code = "import fco_ray\n" + code
    (tmp_path / "examples").symlink_to(REPO / "examples")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(expected, done.stdout), done.stdout
    if index == 1:  # the model is saved in a new temporary folder, not the working directory
        import numpy as np

        assert not (tmp_path / "model.npz").exists()
        where = Path(done.stdout.split()[-1])
        assert tmp_path not in where.parents
        with np.load(where, allow_pickle=False) as saved:
            assert set(saved.files) == {"w", "b"}
        shutil.rmtree(where.parent)
