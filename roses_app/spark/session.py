"""Building the SparkSession ROSES runs on, and the JVM under it.

ROSES starts Spark's JVM itself (pyspark's ``launch_gateway``) rather than letting
the first SparkContext do it, for three reasons:

* **Stopping is ours.** The JVM, and the Python workers it forks, run in a session of
  their own: neither a terminal's Ctrl-C nor ``kill -TERM -PGID`` (systemd) reaches
  them, so they cannot die under the batch in flight.  The daemon stops the queries
  itself, then the JVM; at interpreter exit the JVM is asked to exit and waited for.
* **The data folder lock** (``keep_fds``) is inherited by the JVM, so the folder stays
  locked until the JVM, which writes the checkpoints, is gone too.
* **A readable log.** The JVM's stderr is relayed line by line, without the one
  warning every JVM prints for the incubator module Spark always asks for.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from py4j.java_gateway import JavaGateway
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from roses_app.config.model import LimitSettings, SparkSettings
from roses_app.javaenv import apply_java_env, default_cache_dir
from roses_app.rlimit import MEMORY_ENV
from roses_app.spark.classarchive import FOLDER, ClassArchive, class_archive
from roses_app.xmlfn.budget import ENV as ITEM_SECONDS_ENV

log = logging.getLogger(__name__)

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# printed by the JVM itself for Spark's --add-modules=jdk.incubator.vector; says nothing
# a user can act on
DROPPED_JVM_LINES = (
    b"WARNING: Using incubator modules:",
    # pyspark's transformWithStateInPandas worker prints these (each followed by an
    # empty line, dropped too) for every micro-batch: four per stateful operator
    b"Starting Streaming TransformWithStateInPandas Python worker",
    b"Streaming TransformWithStateInPandas Python worker ",
)
# A finite run (once, replay, explain) compiles the JVM's hot code with C1 only: on 2
# cores C2's compiler threads take the cores from the Python workers during a run
# that ends before C2's code pays back (benchmarks/bench_jit.py: a cold 100,000-item
# replay 1.46x faster net of its start, the start 1.19x, `roses once` 1.18x).  The
# daemon, which runs for days, keeps tiered compilation (C1, then C2 for what stays
# hot): warm passes in one JVM were 20 % faster tiered on bench_replay's workload.
FINITE_JIT = "-XX:TieredStopAtLevel=1"
JVM_EXIT_SECONDS = 30.0  # at exit, how long the JVM may take to shut down
ARCHIVE_EXIT_SECONDS = 60.0  # the same when it writes its class archive then (~10 s)
_silenced = threading.Event()  # set: the JVM's stderr is drained, not relayed


def session_conf(
    settings: SparkSettings, *, finite: bool = False, limits: LimitSettings | None = None
) -> dict[str, str]:
    """Spark's settings (``finite``: for a run that ends by itself; see FINITE_JIT;
    ``limits``: what the Python workers apply, through their environment)."""
    limits = limits or LimitSettings()
    java = f"-Dlog4j.configurationFile={LOG4J_CONFIG}" + (f" {FINITE_JIT}" if finite else "")
    conf = {
        "spark.master": settings.master,
        "spark.app.name": "roses",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        # One Python worker per core, reused, so compiled expressions stay cached.
        "spark.python.worker.reuse": "true",
        # the daemon that forks them: pyspark's, run from its compiled code rather than
        # its zip (spark/pydaemon.py)
        "spark.python.daemon.module": "roses_app.spark.pydaemon",
        "spark.driver.bindAddress": "127.0.0.1",
        # local mode runs the tasks in the driver JVM: 1g (Spark's default) is short
        # for a micro-batch of 100,000 items with a thousand subscriptions
        "spark.driver.memory": "2g",
        "spark.driver.host": "127.0.0.1",
        # Stateful operators (windows, aggregates, outer joins) emit what the last
        # watermark closed only in a no-data batch; availableNow (replay, once) runs
        # its final one only when these are on.  Stateless queries never get one.
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        # A generation query unions the branches of many streams; two streams that
        # share a stateful node (an aggregate, say) each carry a copy of it, and
        # Spark's reuse of identical shuffles then feeds the second copy's state
        # operator from the first one's exchange, which loses its output.
        "spark.sql.exchange.reuse": "false",
        # Adaptive execution does not apply to streaming queries (Spark warns if on).
        "spark.sql.adaptive.enabled": "false",
        "spark.driver.extraJavaOptions": java,
        "spark.executor.extraJavaOptions": java,
        # settings.limits in every Python worker: the time an expression may take on an
        # item (xmlfn/budget.py), the data memory of each (its daemon's RLIMIT_DATA)
        f"spark.executorEnv.{ITEM_SECONDS_ENV}": f"{limits.item_seconds or 0:g}",
        f"spark.executorEnv.{MEMORY_ENV}": str(limits.worker_memory or 0),
    }
    conf.update(dict(settings.conf))
    return conf


def build_session(
    settings: SparkSettings,
    cache_dir: Path,
    keep_fds: Sequence[int] = (),
    *,
    finite: bool = False,
    limits: LimitSettings | None = None,
) -> SparkSession:
    """Get or create the SparkSession, making sure a usable Java runtime is there.

    ``keep_fds`` are inherited by the JVM when this call starts it (the data folder
    lock); ``finite``: the run ends by itself (``roses once``, ``replay``, ``explain``:
    see FINITE_JIT), which matters only to the call that starts the JVM.  The caller's
    SIGINT handler stays in place.
    """
    apply_java_env(cache_dir)
    # Spark binds to 127.0.0.1 and does not warn that the host name is a loopback one.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = session_conf(settings, finite=finite, limits=limits)
    archive = None
    if settings.class_archive and SparkContext._gateway is None:
        java_home = Path(os.environ["JAVA_HOME"])
        archive = class_archive(default_cache_dir() / FOLDER, java_home, conf)
    start_jvm(conf, keep_fds, archive)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    previous = signal.getsignal(signal.SIGINT)
    spark = builder.getOrCreate()
    if previous is not None and threading.current_thread() is threading.main_thread():
        # pyspark's handler cancels every job and raises KeyboardInterrupt: a batch
        # cut in the middle and pages of traces instead of a clean stop.
        signal.signal(signal.SIGINT, previous)
    spark.sparkContext.setLogLevel("WARN")
    return spark


def start_jvm(
    conf: Mapping[str, str], keep_fds: Sequence[int] = (), archive: ClassArchive | None = None
) -> None:
    """Start Spark's JVM in its own session, stderr relayed, unless one runs already;
    with its class archive (see ``classarchive``), or without if it fails with it."""
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        try:
            gateway = _launch(conf, keep_fds, archive)
        except RuntimeError:  # pyspark: the JVM exited before it gave its port
            if archive is None or archive.pending is not None:
                raise
            archive = archive.discard()
            gateway = _launch(conf, keep_fds, archive)
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm
    atexit.register(stop_jvm, gateway.proc, archive)


def _launch(
    conf: Mapping[str, str], keep_fds: Sequence[int], archive: ClassArchive | None
) -> JavaGateway:
    values = dict(conf)
    if archive is not None:
        key = "spark.driver.extraJavaOptions"
        values[key] = f"{values.get(key, '')} {archive.java_options()}".strip()
    read_end, write_end = os.pipe()
    threading.Thread(target=relay_stderr, args=(read_end,), name="jvm-stderr", daemon=True).start()
    try:
        return launch_gateway(
            SparkConf().setAll(list(values.items())),
            popen_kwargs={
                "start_new_session": True,
                "pass_fds": tuple(keep_fds),
                "stderr": write_end,
            },
        )
    finally:
        os.close(write_end)  # the JVM holds its own copy: EOF comes when it exits


def silence_jvm() -> None:
    """Relay nothing more from the JVM (it is being torn down on purpose)."""
    _silenced.set()


def relay_stderr(fd: int) -> None:
    """Copy the JVM's stderr to ours, line by line, dropping DROPPED_JVM_LINES (and
    the empty line after one)."""
    dropped = False
    with open(fd, "rb") as lines:
        for line in lines:
            blank_after = dropped and not line.strip()
            dropped = line.startswith(DROPPED_JVM_LINES)
            if _silenced.is_set() or dropped or blank_after:
                continue
            # fd 2 itself, as the JVM had before: whatever stderr is now (a file, a
            # pytest capture), the lines land there
            view = memoryview(line)
            with contextlib.suppress(OSError):  # stderr gone: keep draining the pipe
                while view:
                    view = view[os.write(2, view) :]


def stop_jvm(proc: subprocess.Popen[bytes] | None, archive: ClassArchive | None = None) -> None:
    """Let the JVM exit (it does when its stdin closes) and wait for it, so that what
    it holds (checkpoint files, the data folder lock) is free when ROSES exits; then
    take the class archive it wrote, if it did (also when it had exited already)."""
    if proc is None:
        return
    if proc.poll() is None:
        _let_exit(proc, archive is not None and archive.pending is not None)
    if archive is not None:
        archive.adopt(proc.returncode)


def _let_exit(proc: subprocess.Popen[bytes], writes: bool) -> None:
    """Close the JVM's stdin and wait for its exit (``writes``: its class archive)."""
    context = SparkContext._active_spark_context
    if context is not None and context._accumulatorServer is not None:
        let_accumulators_go(context._accumulatorServer)
        context._accumulatorServer = None  # type: ignore[assignment]
    # No py4j call here: the JVM stops its SparkContext itself as it exits.
    disconnect_proxies()
    if writes:
        # Its threads outlive Spark's shutdown while it writes (~10 s): the state
        # store's maintenance then logs a stack trace for the SparkEnv gone.
        silence_jvm()
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    seconds = ARCHIVE_EXIT_SECONDS if writes else JVM_EXIT_SECONDS
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        log.warning("Spark's JVM (pid %d) did not exit in %.0fs: killing it", proc.pid, seconds)
        proc.kill()
        proc.wait()


def let_accumulators_go(server: socketserver.BaseServer) -> None:
    """Let pyspark's accumulator server end with the JVM, without waiting for it: its
    ``shutdown()`` waits for its handler, which looks at its flag once a second (0.9 s
    of every replay's and ``roses once``'s exit).  Flagged, the handler ends at its
    next poll, or reads the EOF of the JVM's exit, which is no error now."""
    server.server_shutdown = True  # type: ignore[attr-defined]
    report = server.handle_error

    def handle_error(request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], EOFError):
            report(request, client_address)  # type: ignore[arg-type]

    server.handle_error = handle_error  # type: ignore[method-assign]


def disconnect_proxies() -> None:
    """Tell py4j the JVM is going: py4j's finalizer thread tells the JVM of each
    Python proxy of a Java object collected, a second or so late; one sent while the
    JVM exits fails, and py4j logs it with a traceback after the run's last line (4
    replays in 14).  A disconnected client sends none (the JVM frees all as it exits)."""
    gateway = SparkContext._gateway
    if gateway is not None:
        gateway._gateway_client.is_connected = False


_conf_lock = threading.Lock()


@contextlib.contextmanager
def shuffle_partitions(spark: SparkSession, partitions: int | None) -> Iterator[None]:
    """The session's shuffle partitions set to ``partitions`` (None: left alone) while
    a query starts: the query takes a copy of the session's settings as it starts.
    Every start holds the lock, so none starts while another's setting is in place."""
    key = "spark.sql.shuffle.partitions"
    with _conf_lock:
        if partitions is None:
            yield
            return
        before = spark.conf.get(key)
        spark.conf.set(key, str(partitions))
        try:
            yield
        finally:
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)
