# The Python module's tests (ctest runs them: tests/CMakeLists.txt). The module is found through
# PYTHONPATH (the build tree's python/ folder, or an installed package); the CLI, against which
# they compare, through RECUR_CLI.
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cli():
    path = os.environ.get("RECUR_CLI")
    if not path:
        pytest.skip("RECUR_CLI is not set (ctest sets it to the recur binary)")
    return path


def run_cli(*args, stdin=None):
    """Runs `recur ARGS...` and returns its standard output (an error fails the test with its
    standard error)."""
    p = subprocess.run([cli(), *map(str, args)], input=stdin, capture_output=True)
    if p.returncode != 0:
        pytest.fail(f"recur {' '.join(map(str, args))} failed:\n{p.stderr.decode(errors='replace')}")
    return p.stdout


@pytest.fixture(scope="session")
def kjv():
    import recur
    return recur.Model(ROOT / "models" / "kjv", threads=1)


def read_ids(path):
    return [int(line) for line in pathlib.Path(path).read_text().split()]
