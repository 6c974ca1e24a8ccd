"""The verifier's SparkSession: Spark started with the Kafka connector and the digest reader on its classpath.

The verification itself is split by job: verifier/route.py (record classes
and the route's rule), verifier/kafka_source.py (Spark's Kafka source and
its SQL), verifier/pass1.py (bucket aggregates, with the digest reader of
verifier/digest.py), verifier/pass2.py (the records of differing buckets).
Per-record work happens in the JVM; Python sees bucket aggregates and
summarised findings, never records.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ureplicator.common import java
from ureplicator.common.errors import UReplicatorError
from ureplicator.verifier import cds, connector

CONNECTOR_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1"
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")


class SparkUnavailable(UReplicatorError):
    """Spark or its Kafka connector cannot run here; the verification could not start."""

    exit_status = 2


# --- session -----------------------------------------------------------------------------------


def session(master: str | None = None, conf: Mapping[str, str] | None = None, own_archive: bool = False) -> Any:
    """The process's SparkSession, created with the Kafka connector on the classpath.

    ``master`` None means: what spark-submit chose, else ``local[*]``. For local
    masters the connector jars come from ``connector.spark_jars()``; on a
    cluster pass ``--packages`` (see CONNECTOR_PACKAGE) or ``spark.jars``.
    ``own_archive`` (the ``verify`` command): without ``UREPLICATOR_SPARK_CDS``, map the class archive an
    earlier run dumped, or dump one for the next run (verifier/cds.py).
    """
    conf = dict(conf or {})
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # launched by spark-submit: keep its master
    resolved = master or (None if submitted else "local[*]")
    settings: dict[str, str] = {
        "spark.app.name": "ureplicator-verify",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Adaptive query execution sizes each shuffle from what the map side wrote (a few bucket rows,
        # or pass 2's records on a real cluster), instead of a fixed partition count.
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        "spark.redaction.regex": r"(?i)secret|password|token|access[.]?key|jaas|keystore\.key",
    }
    java_options = []
    if LOG4J_CONFIG.is_file():  # errors only, so progress lines stay readable
        java_options.append(f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}")
    if resolved is not None:
        settings["spark.master"] = resolved
    if "spark.jars" not in conf and "spark.jars.packages" not in conf:
        try:
            jars = connector.spark_jars()
            reader = connector.digest_jar(jars)
            settings["spark.jars"] = ",".join(jars if reader is None or reader in jars else [*jars, reader])
        except connector.ConnectorMissing as exc:
            if resolved is None or resolved.startswith("local"):
                raise SparkUnavailable(f"Spark's Kafka connector is missing: {exc}") from None
    explicit = cds.java_options()  # UREPLICATOR_SPARK_CDS names an archive
    java_options += explicit
    if own_archive and not explicit and os.environ.get(cds.CDS_ENV, "").strip() == "":
        try:
            archive = cds.auto_archive(java.java_executable(), settings.get("spark.jars", "").split(","),
                                       cds.cache_folder())
            java_options += cds.auto_options(archive)
        except java.JavaNotFound:
            pass  # reported below, where the session starts
    if java_options:
        settings["spark.driver.extraJavaOptions"] = " ".join(java_options)
    settings.update(conf)
    # pyspark logs every captured JVM error on its own before raising it; we report them once.
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # connection chatter at INFO
    try:
        java.java_executable()
        from pyspark.sql import SparkSession

        builder = SparkSession.builder
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    except java.JavaNotFound as exc:
        raise SparkUnavailable(str(exc)) from None
    except Exception as exc:  # the JVM did not start: its message is all we have
        raise SparkUnavailable(f"cannot start Spark ({settings.get('spark.master')}): {exc}") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def is_connector_missing(exc: BaseException) -> bool:
    text = str(exc)
    return "Failed to find data source: kafka" in text or "DATA_SOURCE_NOT_FOUND" in text
