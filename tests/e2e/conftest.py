"""Fixtures of the end-to-end tests."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generate():
    """results/generate.py, the pages' generator, loaded as a module."""
    spec = importlib.util.spec_from_file_location("results_generate", ROOT / "results" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
