"""`import fco_ray` where numba has no writable cache directory (a read-only install, an
unwritable HOME): the kernels fall back to a private temporary cache, or to none, and give
the same numbers (README "Reliability"). Root writes anywhere, so "not writable" is made
with paths that cannot be directories: HOME=/dev/null, and a `__pycache__` that is a file."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fco_ray
from fco_ray.ops.kernels import keyed_bits

PACKAGE = Path(fco_ray.__file__).resolve().parent
pytestmark = pytest.mark.slow  # fresh processes that compile the kernels, some without a cache

PROBE = """
import sys, tempfile
if sys.argv[1] == "no-temp":
    def refuse(*args, **kwargs):
        raise PermissionError("no temporary directory")
    tempfile.mkdtemp = refuse
    tempfile.tempdir = "/dev/null"  # nor a per-user directory in it
import numba, numpy as np
import fco_ray
from fco_ray.ops import kernels
print(kernels.CACHE, numba.config.CACHE_DIR or "-")
print(kernels.keyed_bits(7, 2, 3, 4, np.arange(5, dtype=np.uint64), 3).tolist())
"""


def _readonly_copy(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    shutil.copytree(PACKAGE, root / "fco_ray", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in [root / "fco_ray", *(p for p in (root / "fco_ray").rglob("*") if p.is_dir())]:
        (folder / "__pycache__").write_text("")  # numba cannot create its in-tree cache here
    return root


def _run(tmp_path: Path, mode: str, site: Path | None = None):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(HOME="/dev/null", PYTHONPATH=str(site or _readonly_copy(tmp_path)),
               TMPDIR=str(tmp_path / "tmp"))
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = done.stdout.splitlines()[-2:]
    return first.split(), np.array(json.loads(second), dtype=np.uint64)


def test_import_without_writable_cache_uses_a_private_temporary_one(tmp_path):
    (cache, where), bits = _run(tmp_path, "temp")
    assert cache == "True" and Path(where).name.startswith("fco-ray-numba-")
    assert np.array_equal(bits, keyed_bits(7, 2, 3, 4, np.arange(5, dtype=np.uint64), 3))


def test_every_process_of_a_user_reuses_one_cache_directory(tmp_path):
    """Not one new directory in /tmp per process: `<tmp>/fco-ray-numba-<uid>`, mode 0700."""
    site = _readonly_copy(tmp_path)
    wheres = [_run(tmp_path, "temp", site)[0][1] for _ in range(2)]
    mine = tmp_path / "tmp" / f"fco-ray-numba-{os.getuid()}"
    assert wheres == [str(mine)] * 2
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == [mine.name]
    assert mine.stat().st_mode & 0o777 == 0o700 and any(mine.rglob("*.nbi"))  # the cache index


def test_a_per_user_directory_others_could_write_is_not_used(tmp_path):
    """Planted (here: mode 0777): never used (numba's index is a pickle); a new private
    directory is used instead and removed when the process exits."""
    planted = tmp_path / "tmp" / f"fco-ray-numba-{os.getuid()}"
    planted.mkdir(parents=True)
    planted.chmod(0o777)
    (cache, where), _ = _run(tmp_path, "temp")
    assert cache == "True" and where != str(planted) and Path(where).name.startswith("fco-ray-numba-")
    assert not Path(where).exists()  # removed at exit
    assert list(planted.iterdir()) == []


def test_import_without_any_cache_directory_compiles_without_cache(tmp_path):
    (cache, where), bits = _run(tmp_path, "no-temp")
    assert cache == "False" and where == "-"
    assert np.array_equal(bits, keyed_bits(7, 2, 3, 4, np.arange(5, dtype=np.uint64), 3))


TOGETHER = """
import os, sys, time
import numpy as np
from fco_ray.ops import kernels
open(sys.argv[1] + "." + str(os.getpid()), "w").close()  # ready
while not os.path.exists(sys.argv[1]):  # all start compiling at once
    time.sleep(0.01)
kernels.soft_threshold(np.arange(4.0), 1.0)
stats = kernels.soft_threshold.stats
print(sum(stats.cache_misses.values()), sum(stats.cache_hits.values()))
"""


def test_processes_that_start_together_compile_a_kernel_once(tmp_path):
    """Three processes call a kernel at the same moment on an empty cache: one compiles it
    (a cache miss) and the others load what it wrote (cache hits), instead of compiling it
    three times (`kernels.kernel`'s lock)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", TOGETHER, str(go)], stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.*"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()
    counts = sorted(tuple(map(int, p.communicate(timeout=300)[0].split())) for p in procs)
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert counts == [(0, 1), (0, 1), (1, 0)]  # (misses, hits): compiled once, loaded twice
