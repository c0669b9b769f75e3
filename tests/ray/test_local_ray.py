"""The test process joins Ray clusters and never starts one itself (tests/cluster_process.py):
starting Ray's daemons forks the caller, and once a test has used JAX in this process every
fork runs JAX's at-fork hook ("os.fork() was called ... this will likely lead to a deadlock")."""
import re
import warnings
from pathlib import Path

import pytest

pytest.importorskip("ray")
jnp = pytest.importorskip("jax.numpy")

pytestmark = pytest.mark.ray
TESTS = Path(__file__).resolve().parents[1]


def test_the_session_cluster_starts_without_forking_a_jax_process(local_ray):
    import ray

    jnp.ones(3).sum().block_until_ready()  # JAX's backend up in this process: its fork hook set
    local_ray.down()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        local_ray.up()
        assert ray.get(ray.remote(lambda: 2 + 2).remote()) == 4
    forks = [str(w.message) for w in caught if "os.fork() was called" in str(w.message)]
    assert not forks, forks
    assert ray.cluster_resources()["CPU"] == 2


def test_no_test_starts_ray_in_its_own_process():
    """Every in-process cluster goes through `ClusterProcess` (a subprocess that a test
    starts, such as `fco-ray sweep` or `ray start`, forks in its own process: not counted)."""
    starts = re.compile(r"ray\.init\(\s*address=[\"']local|cluster_utils|Cluster\(initialize_head")
    found = [f"{p.relative_to(TESTS)}:{i}" for p in TESTS.rglob("*.py") if p.name not in ("cluster_process.py", "test_local_ray.py")
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if starts.search(line) and not line.lstrip().startswith(("#", '"'))]
    assert found == []
