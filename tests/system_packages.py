"""What the tests need from the system, and the Debian packages that provide it.

This is the one list of them: ``.ci/run`` installs every package, ``scripts/test``
(through ``scripts/bootstrap.sh``) installs the missing ones when it runs as root, and
:func:`require` skips a test whose need is missing, saying which command installs it.
Under CI (``CI=true``) a missing need fails the test instead: CI must run them all.

    python tests/system_packages.py            # every package, one a line
    python tests/system_packages.py --missing  # the packages of the needs missing here

Standard library only at import time: ``.ci/run`` runs this file with the system
Python, before ``.venv`` (and pytest) exist.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

# Daemons such as dovecot are installed in sbin, which a normal user's PATH lacks.
SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def find_program(name: str) -> Path | None:
    found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))
    return Path(found) if found else None


def find_cpython_email_data() -> Path | None:
    """CPython's ``test_email`` messages: in this Python, or where Debian's package puts them."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (
        Path(sysconfig.get_paths()["stdlib"]) / "test" / "test_email" / "data",
        Path("/usr/lib") / version / "test" / "test_email" / "data",
        Path("/usr/lib/python3.11/test/test_email/data"),  # the package Debian 12 has
    ):
        if len(list(candidate.glob("msg_*.txt"))) >= 47:
            return candidate
    return None


def find_chromium() -> Path | None:
    """Chromium's headless shell: on PATH (Debian's wrapper), else where Debian puts it."""
    found = find_program("chromium-headless-shell")
    if found is not None:
        return found
    binary = Path("/usr/lib/chromium/chromium-headless-shell")
    return binary if os.access(binary, os.X_OK) else None


@dataclass(frozen=True)
class Need:
    name: str  # what a test asks for: require(name), @pytest.mark.requires(name)
    package: str  # the Debian package that provides it
    why: str
    find: Callable[[], Path | None]


NEEDS: dict[str, Need] = {
    need.name: need
    for need in (
        Need(
            "newsboat",
            "newsboat",
            "a real feed reader for the end-to-end tests",
            functools.partial(find_program, "newsboat"),
        ),
        Need(
            "dovecot",
            "dovecot-imapd",
            "a real IMAP server for the mail connector tests",
            functools.partial(find_program, "dovecot"),
        ),
        Need(
            "cpython-email-data",
            "libpython3.11-testsuite",
            "CPython's test_email messages for the mail corpus tests",
            find_cpython_email_data,
        ),
        Need(
            "chromium",
            "chromium-headless-shell",
            "a real browser for the tests of the HTML pages",
            find_chromium,
        ),
        Need(
            "chromium-browser",
            "chromium",
            "the full browser Selenium drives for the console's tests",
            functools.partial(find_program, "chromium"),
        ),
        Need(
            "chromium-driver",
            "chromium-driver",
            "WebDriver for Chromium: Selenium drives the console's pages through it",
            functools.partial(find_program, "chromedriver"),
        ),
    )
}


def under_ci() -> bool:
    """True on a CI runner (``CI=true``, as .ci/run and most CI services set)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def install_command(*packages: str) -> str:
    sudo = "" if os.geteuid() == 0 else "sudo "
    return f"{sudo}apt-get install {' '.join(packages)}"


def require(name: str) -> Path:
    """Where the system provides ``name``; when it does not, skip the test (fail under CI)."""
    need = NEEDS[name]
    found = need.find()
    if found is not None:
        return found
    # pytest is imported here, not at the top: .ci/run runs this file without it.
    import pytest

    message = f"{name} is missing ({need.why}): {install_command(need.package)}"
    if under_ci():
        pytest.fail(f"{message}; CI must run every test (.ci/run installs it)")
    pytest.skip(f"{message}, or run scripts/test as root, which installs it")


# What a skip must say: the command that installs what is missing.
INSTALLERS = ("apt-get install ", "pip install ")


def skip_message(what: str, command: str) -> str:
    """``what``: ``command``; refused when the command installs nothing (the rule of
    every skip: tests/test_skips.py sends each one through here or :func:`require`)."""
    if not any(installer in command for installer in INSTALLERS):
        raise ValueError(
            f"a skip must give the apt-get or pip command that installs what is missing "
            f"({' or '.join(repr(i.strip()) for i in INSTALLERS)}); got {command!r}"
        )
    return f"{what}: {command}"


def skip_missing(what: str, command: str) -> NoReturn:
    """Skip the running test, saying ``what`` is missing and the ``command`` that
    installs it; under CI fail instead: CI must run every test."""
    import pytest

    message = skip_message(what, command)
    if under_ci():
        pytest.fail(f"{message}; CI must run every test")
    pytest.skip(message)


def skip_unless(condition: bool, what: str, command: str) -> Any:
    """A ``skipif`` mark for what the Python running the tests lacks (a feature of a
    later version): skipped under CI as well, since the venv's Python decides it."""
    import pytest

    return pytest.mark.skipif(not condition, reason=skip_message(what, command))


def main(argv: list[str]) -> int:
    if argv not in ([], ["--missing"]):
        print("usage: system_packages.py [--missing]", file=sys.stderr)
        return 2
    for need in NEEDS.values():
        if not argv or need.find() is None:
            print(need.package)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
