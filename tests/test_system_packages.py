"""What the tests need from the system: found, skipped with the install command, or failed under CI.

``system_packages.require`` (called by fixtures, and by conftest for the ``requires``
marker) is checked with PATH pointing at an empty folder, so the program is not found;
the marker on a real end-to-end test, ``.ci/run``'s list and bootstrap's plan are checked
through the same script a fresh machine runs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import system_packages
from system_packages import NEEDS, require
from test_mail_support import running_dovecot

REPO = Path(__file__).resolve().parent.parent
SUDO = "" if os.geteuid() == 0 else "sudo "


@pytest.fixture
def empty_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH is an empty folder and sbin is not searched: no program is found."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setattr(system_packages, "SBIN", ())
    return folder


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_missing_program_skips_with_the_install_command(
    empty_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str | None
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception) as skipped:
        require("newsboat")
    message = str(skipped.value)
    assert message.startswith("newsboat is missing (a real feed reader for the end-to-end tests)")
    assert f": {SUDO}apt-get install newsboat" in message


@pytest.mark.parametrize("ci", ["true", "1", "True"])
def test_missing_program_fails_under_ci(
    empty_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception) as failed:
        require("newsboat")
    assert f"{SUDO}apt-get install newsboat" in str(failed.value)
    assert "CI must run every test" in str(failed.value)


@pytest.mark.parametrize("ci", [None, "true"])
def test_present_program_is_found_on_path(
    empty_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str | None
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    program = empty_path / "newsboat"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert require("newsboat") == program


def test_programs_in_sbin_are_found_without_sbin_on_path(
    empty_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    (sbin / "dovecot").write_text("#!/bin/sh\n")
    (sbin / "dovecot").chmod(0o755)
    monkeypatch.setattr(system_packages, "SBIN", (str(sbin),))
    assert require("dovecot") == sbin / "dovecot"


def test_the_dovecot_fixtures_skip_without_dovecot(
    empty_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped, running_dovecot():
        pytest.fail("a Dovecot started without dovecot")
    assert f"{SUDO}apt-get install dovecot-imapd" in str(skipped.value)


def run_marked_e2e_test(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """A real ``requires("newsboat")`` test, in its own pytest, on a PATH without newsboat.

    Its temporary folders go under ``tmp_path/base``: its fixtures create one.
    """
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(tmp_path)
    if ci is not None:
        env["CI"] = ci
    test = "tests/test_e2e.py::test_newsboat_subscribes_and_sees_new_items"
    base = f"--basetemp={tmp_path / 'base'}"
    return subprocess.run(
        [sys.executable, "-m", "pytest", test, "-rsf", "-p", "no:cacheprovider", base],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_marker_skips_before_the_fixtures_start_anything(tmp_path: Path) -> None:
    done = run_marked_e2e_test(tmp_path, ci=None)
    assert "1 skipped" in done.stdout, done.stdout + done.stderr
    assert f"{SUDO}apt-get install newsboat" in done.stdout
    assert not list((tmp_path / "base").glob("test_*"))  # its fixtures never ran


def test_marker_fails_under_ci(tmp_path: Path) -> None:
    done = run_marked_e2e_test(tmp_path, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 error" in done.stdout  # a failure in its set-up: the run fails
    assert f"{SUDO}apt-get install newsboat" in done.stdout


def script(command: str, path: Path) -> list[str]:
    """A line of shell run from the repository with PATH=path; its output's words."""
    done = subprocess.run(
        ["/bin/bash", "-c", command],
        cwd=REPO,
        env={"PATH": str(path)},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_ci_installs_every_package_of_the_one_list(tmp_path: Path) -> None:
    packages = script(f"{sys.executable} tests/system_packages.py", tmp_path)
    assert packages == [need.package for need in NEEDS.values()]
    assert "newsboat" in packages and "dovecot-imapd" in packages
    assert "tests/system_packages.py" in (REPO / ".ci" / "run").read_text()


def bootstrap_plan(tmp_path: Path, uid: int, *, apt: bool, newsboat: bool) -> list[str]:
    """bootstrap.sh's roses_test_packages_plan with apt-get and newsboat faked or absent."""
    folder = tmp_path / f"bin-{uid}-{apt}-{newsboat}"
    folder.mkdir()
    for name, present in (("apt-get", apt), ("newsboat", newsboat)):
        if present:
            (folder / name).write_text("#!/bin/sh\nexit 0\n")
            (folder / name).chmod(0o755)
    (folder / "dirname").symlink_to(shutil.which("dirname") or "/usr/bin/dirname")  # bootstrap's
    command = (
        f"source scripts/bootstrap.sh; ROSES_PY={sys.executable}; roses_test_packages_plan {uid}"
    )
    return script(command, folder)


@pytest.mark.parametrize(
    ("uid", "apt", "action"),
    [
        (0, True, "apt"),  # root: apt-get install the missing ones, as for Java
        (0, False, "skip"),  # root without apt-get
        (1000, True, "skip"),  # not root: the tests are skipped, with the command
    ],
)
def test_bootstrap_installs_missing_packages_only_as_root(
    tmp_path: Path, uid: int, apt: bool, action: str
) -> None:
    plan = bootstrap_plan(tmp_path, uid, apt=apt, newsboat=False)
    assert plan[0] == action and "newsboat" in plan[1:]


def test_bootstrap_leaves_present_packages_alone(tmp_path: Path) -> None:
    plan = bootstrap_plan(tmp_path, 0, apt=True, newsboat=True)
    assert "newsboat" not in plan  # the others depend on this machine


def compile_pyspark(site: Path) -> subprocess.CompletedProcess[str]:
    """bootstrap.sh's roses_compile_pyspark on ``site``, writing no bytecode otherwise."""
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(site),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    command = f"source scripts/bootstrap.sh; ROSES_PY={sys.executable}; roses_compile_pyspark"
    return subprocess.run(
        ["/bin/bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )


def test_bootstrap_compiles_pyspark_even_under_pythondontwritebytecode(tmp_path: Path) -> None:
    """pyspark installed by 'setup.py install' under PYTHONDONTWRITEBYTECODE has no
    bytecode; its workers run the compiled code (roses_app/spark/pydaemon.py)."""
    package = tmp_path / "site" / "pyspark"
    (package / "sql").mkdir(parents=True)
    for name in ("__init__.py", "worker.py", "sql/__init__.py"):
        (package / name).write_text("X = 1\n")
    first = compile_pyspark(tmp_path / "site")
    assert "compiling" in first.stderr
    for name in ("worker.py", "sql/__init__.py"):
        assert Path(importlib.util.cache_from_source(str(package / name))).is_file(), name
    again = compile_pyspark(tmp_path / "site")  # compiled: nothing to do
    assert again.stderr == ""
