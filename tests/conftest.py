"""Fixtures shared by the test modules."""
import pytest


@pytest.fixture(scope="module")
def ray_cluster():
    """A small local Ray cluster of its own for the module's tests, shut down after them."""
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()
