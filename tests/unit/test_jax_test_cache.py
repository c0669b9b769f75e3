"""The tests' JAX compilation cache is bounded once a session (tests/conftest.py), not by JAX
on every write."""
import os

from tests.conftest import prune_jax_cache


def test_the_least_recently_used_entries_go_until_the_cache_fits(tmp_path):
    for i in range(5):
        path = tmp_path / f"jit_f-{i}-cache"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))  # entry 0 the least recently used
    os.utime(tmp_path / "jit_f-1-cache", (5000, 1001))  # read lately: kept
    assert prune_jax_cache(tmp_path, limit=250) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jit_f-1-cache", "jit_f-4-cache"]
    assert prune_jax_cache(tmp_path, limit=250) == 0
    assert prune_jax_cache(tmp_path / "absent") == 0
