"""A class data sharing (AppCDS) archive of Spark's classes: a cold verifier JVM starts in less than half the time.

A new ``ureplicator verify`` process (the CronJob path) spent most of its
start-to-verdict loading and verifying Spark's classes. The JVM can map them
from an archive dumped by an earlier run instead. ``python -m ureplicator.verifier.cds
ARCHIVE`` writes one: it starts the verifier's own SparkSession with
``-XX:ArchiveClassesAtExit``, runs the kind of query the verifier runs (no
cluster needed) and exits, which dumps the classes the run loaded. The
verifier image builds one (the Dockerfile runs ``python -m
ureplicator.verifier.cds``) and sets ``UREPLICATOR_SPARK_CDS``; the driver then
starts with ``-XX:SharedArchiveFile`` (``-Xshare:auto``: an archive from
another JVM or classpath is ignored, never an error). Measured on a shared
2-core machine: a cold run of 100,000 records went from 26 s to 10-11 s.

Without ``UREPLICATOR_SPARK_CDS`` the ``verify`` command keeps an archive of
its own (``auto_options``): the first cold run dumps the classes it loaded
when its JVM exits, into the user's cache folder, and every later run with
the same Java, pyspark and jars maps them. ``UREPLICATOR_SPARK_CDS=off``
turns both off.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

CDS_ENV = "UREPLICATOR_SPARK_CDS"
_QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]  # a stale archive is ignored without a word on stdout


OFF = "off"
# The first bytes of a complete dynamic archive (JDK's CDS_DYNAMIC_ARCHIVE_MAGIC, little-endian). The JVM writes
# the header last, so a dump cut short (the process killed while writing) has none and is never used.
_DYNAMIC_MAGIC = bytes.fromhex("a8ab0bf0")


def archive(environ: Mapping[str, str] | None = None) -> Path | None:
    """The archive the driver maps, when ``UREPLICATOR_SPARK_CDS`` names an existing file."""
    value = (os.environ if environ is None else environ).get(CDS_ENV, "").strip()
    return Path(value) if value and value != OFF and Path(value).is_file() else None


def java_options(environ: dict[str, str] | None = None) -> list[str]:
    found = archive(environ)
    return [f"-XX:SharedArchiveFile={found}", "-Xshare:auto", *_QUIET] if found is not None else []


def cache_folder(environ: Mapping[str, str] | None = None) -> Path:
    """Where the ``verify`` command keeps its own archive: ``$XDG_CACHE_HOME/ureplicator`` (``~/.cache``)."""
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ureplicator"


def auto_archive(java: str, jars: Sequence[str], folder: Path) -> Path:
    """The archive of one JVM and classpath: named by a digest of the Java executable, pyspark's version and
    jars, and ours (paths, sizes, times), so that a changed install gets a new archive instead of a refused one."""
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars"
    parts = [str(Path(java).resolve()), pyspark.__version__]
    for jar in sorted([*jars, *(str(j) for j in spark_jars.glob("*.jar"))]):
        try:
            stat = Path(jar).stat()
        except OSError:
            continue
        parts.append(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}")
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return folder / f"spark-{key}.jsa"


def auto_options(target: Path) -> list[str]:
    """JVM options for the ``verify`` command's own archive at ``target``: map it when it is there; else dump the
    classes this run loads at the JVM's exit, beside it, for the next run. A finished dump is moved into place
    by the next run (the JVM cannot rename its output); other archives in the folder are removed then."""
    _promote(target)
    if target.is_file():
        return [f"-XX:SharedArchiveFile={target}", "-Xshare:auto", *_QUIET]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return []  # no writable cache: start as before
    return [f"-XX:ArchiveClassesAtExit={target.with_name(f'{target.name}.{os.getpid()}.part')}", *_QUIET]


_STALE_S = 600.0  # an unfinished dump this old was cut short: its JVM is gone


def _promote(target: Path) -> None:
    if target.is_file() or not target.parent.is_dir():
        return
    for part in sorted(target.parent.glob(f"{target.name}.*.part")):
        try:
            finished = complete(part)
            if not finished and time.time() - part.stat().st_mtime > _STALE_S:
                part.unlink(missing_ok=True)
            elif finished:
                part.replace(target)
                for old in target.parent.glob("spark-*.jsa*"):
                    if old != target and not old.name.startswith(f"{target.name}."):
                        old.unlink(missing_ok=True)
                return
        except OSError:
            continue


def train(target: Path) -> None:
    """Dump the classes a verifier run loads into ``target`` (at the JVM's exit, so call it in a fresh process)."""
    from ureplicator.verifier import digest, kafka_source, sparkjob, sql

    os.environ.pop(CDS_ENV, None)
    target.parent.mkdir(parents=True, exist_ok=True)
    options = [f"-Dlog4j2.configurationFile=file:{sparkjob.LOG4J_CONFIG}", f"-XX:ArchiveClassesAtExit={target}",
               *_QUIET]
    spark = sparkjob.session("local[2]", {"spark.driver.extraJavaOptions": " ".join(options)})
    digest.available(spark)
    # A pass-1-shaped query over a few records in Kafka's schema: the classes of the record hash,
    # the header handling and the bucket aggregation, without a cluster.
    from datetime import datetime, timezone

    from ureplicator.common import provenance

    now = datetime.now(timezone.utc)
    records = [(b"k%d" % i, b"v%d" % i, "t", i % 2, i, now, 0,
                [("trace", b"x"), (provenance.HEADER, provenance.encode(i, i % 2, "src"))]) for i in range(2_000)]
    frame = kafka_source.with_header_columns(
        spark.createDataFrame(records, kafka_source.kafka_schema()), sql.LAST_UREP
    ).selectExpr("partition AS p", "offset AS o", f"{sql.CONTENT_HASH} AS h", "offset div 100 AS bucket")
    frame.groupBy("p", "bucket").agg({"h": "bit_xor", "o": "min"}).join(frame.select("p").distinct(), "p").collect()
    from pyspark import SparkContext

    jvm = getattr(SparkContext._gateway, "proc", None)
    spark.stop()
    if jvm is not None and jvm.stdin is not None:
        # The JVM exits when its stdin closes and dumps the archive as it exits. Wait for it: a build step (the
        # verifier image's) must end with the archive complete, not with its JVM killed in the middle of the dump.
        jvm.stdin.close()
        jvm.wait(timeout=900)


def complete(path: Path) -> bool:
    """Whether ``path`` is a finished dynamic archive (the JVM writes its header last)."""
    try:
        with path.open("rb") as dumped:
            return dumped.read(len(_DYNAMIC_MAGIC)) == _DYNAMIC_MAGIC
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ureplicator.verifier.cds ARCHIVE", file=sys.stderr)
        return 2
    target = Path(args[0]).resolve()
    train(target)
    if not complete(target):
        print(f"python -m ureplicator.verifier.cds: the JVM wrote no complete class archive at {target}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
