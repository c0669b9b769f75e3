"""A pytest plugin for `benchmarks/suite_profile.py`: JAX's compilation events per test.

Loaded with `-p benchmarks.jit_events` (pytest-xdist's workers load it too). It listens to
`jax.monitoring`'s duration events (tracing, lowering to MLIR, the backend's compilation or
the persistent cache's read, the compile time a cache hit saved), adds them up per test, and
writes `jit-<worker>.json` into the folder `FCO_JIT_EVENTS` names when the session ends, with
each test's wall time and the summed seconds per compiled function's name.
"""
from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path

import pytest

#: the last part of jax.monitoring's event names that count as compilation work
PHASES = ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration", "backend_compile_duration",
          "cache_retrieval_time_sec", "compile_time_saved_sec")

_per_test: dict = collections.defaultdict(lambda: collections.defaultdict(float))
_per_function: dict = collections.defaultdict(float)
_count: dict = collections.defaultdict(int)
_wall: dict = {}
_current = ["<outside tests>"]


def _listen(event: str, seconds: float, **meta) -> None:
    phase = event.rsplit("/", 1)[-1]
    if phase not in PHASES:
        return
    _per_test[_current[0]][phase] += seconds
    _count[phase] += 1
    if phase not in ("cache_retrieval_time_sec", "compile_time_saved_sec"):
        _per_function[f"{phase} {meta.get('fun_name', '?')}"] += seconds


def pytest_configure(config):
    if os.environ.get("FCO_JIT_EVENTS"):
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(_listen)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.nodeid
    start = time.perf_counter()
    yield
    _wall[item.nodeid] = time.perf_counter() - start
    _current[0] = "<outside tests>"


def pytest_unconfigure(config):
    folder = os.environ.get("FCO_JIT_EVENTS")
    if not folder:
        return
    from fco_ray.runtime.files import write_file

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    write_file(Path(folder) / f"jit-{worker}.json", json.dumps(
        {"per_test": _per_test, "wall": _wall, "count": _count, "per_function": _per_function}))
