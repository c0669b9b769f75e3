"""The session's Ray cluster (tests/conftest.py: LocalRay) starts without forking a process
that has used JAX: JAX warns at every fork once its backend is up ("os.fork() was called ...
this will likely lead to a deadlock"), and `ray.init(address="local")` forks the caller to
start Ray's daemons."""
import warnings

import pytest

pytest.importorskip("ray")
jnp = pytest.importorskip("jax.numpy")

pytestmark = pytest.mark.ray


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
