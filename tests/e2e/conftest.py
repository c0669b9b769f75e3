"""Fixtures of the end-to-end tests."""
import pytest


@pytest.fixture(scope="module")
def generate():
    """results/generate.py, the pages' driver (its blocks: results/pages/, one module per page)."""
    from results import generate

    return generate
