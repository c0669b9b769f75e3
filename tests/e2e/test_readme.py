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


#: printed between the README's examples when they run in one interpreter
SEPARATOR = "----- end of a README example -----"

#: what each of the README's three API examples prints
README_OUTPUTS = [
    r"round\s+train_loss\s+f1\s+density\s+val_mse[\s\S]*\n\d+\s+100\s[\s\S]*\nfinished\n$",
    r"^\d+ [01]\.\d+ /\S+/model\.npz\n$",
    r"algorithm.client_lr\s+algorithm.server_lr\s*\n0\.001\s+0\.3\s+[0-9.]+\n[\s\S]*"
    r"0\.010\s+0\.3\s+[0-9.]+\n\s+1\.0\s+[0-9.]+\nName: f1",
]


def test_the_readme_api_examples_run_in_order_and_print(tmp_path):
    """The README's three API examples run as a reader runs them: in order, in one new
    interpreter (the second and third continue the first: its imports and session), in a new
    working directory; each prints what it promises. (One process for the three, not one
    each: ~4 s of imports apiece.)"""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    code = f"\nprint({SEPARATOR!r})\n".join(python_blocks()[:3])
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = done.stdout.split(SEPARATOR + "\n")
    assert len(outputs) == 3, done.stdout
    for index, (stdout, expected) in enumerate(zip(outputs, README_OUTPUTS)):
        assert re.search(expected, stdout), (index, stdout)
    # the model is saved in a new temporary folder, not the working directory
    import numpy as np

    assert not (tmp_path / "model.npz").exists()
    where = Path(outputs[1].split()[-1])
    assert tmp_path not in where.parents
    with np.load(where, allow_pickle=False) as saved:
        assert set(saved.files) == {"w", "b"}
    shutil.rmtree(where.parent)


def test_the_custom_problem_example_runs_and_prints(tmp_path):
    """docs/problems.md's example, in an interpreter of its own."""
    done = subprocess.run([sys.executable, "-c", python_blocks()[3]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"round\s+train_loss\n\s+80 [\s\S]*\n\s*100 [\s\S]*\nw = \[[-0-9. ]+\]\n$",
                     done.stdout), done.stdout
