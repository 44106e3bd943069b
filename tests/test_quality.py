"""The code stays ruff- and mypy-clean (they run in seconds once cached)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True)


def test_ruff_is_clean() -> None:
    result = run("ruff", "check", "roses_app", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = run("mypy", "roses_app")
    assert result.returncode == 0, result.stdout + result.stderr
