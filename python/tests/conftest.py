"""conftest.py — what every test of the Python package shares: the source
tree (SHARDC_SOURCE_DIR), the command line of the same build (SHARDC, the
`shardc` binary next to $SHARDC_LIBRARY) and seeded inputs."""
import os
import sys

import numpy as np
import pytest

SOURCE = os.environ.get("SHARDC_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(SOURCE, "python"))


@pytest.fixture(scope="session")
def source():
    return SOURCE


@pytest.fixture(scope="session")
def shardc_cli():
    exe = os.environ.get("SHARDC")
    if not exe:
        exe = os.path.join(os.path.dirname(os.environ["SHARDC_LIBRARY"]), "shardc")
    assert os.path.exists(exe), exe
    return exe


@pytest.fixture
def rng():
    return np.random.default_rng(2026)
