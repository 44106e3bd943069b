"""Building the SparkSession ROSES runs on."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pyspark.sql import SparkSession

from roses_app.config.model import SparkSettings
from roses_app.javaenv import apply_java_env

log = logging.getLogger(__name__)

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def session_conf(settings: SparkSettings) -> dict[str, str]:
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
        "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile={LOG4J_CONFIG}",
        "spark.executor.extraJavaOptions": f"-Dlog4j.configurationFile={LOG4J_CONFIG}",
    }
    conf.update(dict(settings.conf))
    return conf


def build_session(settings: SparkSettings, cache_dir: Path) -> SparkSession:
    """Get or create the SparkSession, making sure a usable Java runtime is there."""
    apply_java_env(cache_dir)
    # Spark binds to 127.0.0.1 and does not warn that the host name is a loopback one.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for key, value in session_conf(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
