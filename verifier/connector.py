"""Locate the Spark Kafka connector jars the verifier puts on Spark's classpath (local masters).

Looked up, first match wins:

1. ``UREPLICATOR_SPARK_JARS``: a folder of jars, or jar files separated by ``,`` or ``:``
   (the images set it; an explicit value that names no jar is an error, not a fall-through);
2. ``<sys.prefix>/share/ureplicator/spark-kafka/``: an install location next to the virtualenv;
3. the development cache that ``make install`` fills: ``$UREPLICATOR_CACHE/jvm/spark-kafka/``,
   else ``.cache/jvm/spark-kafka/`` under the working directory.

``ureplicator verify --conf spark.jars=...`` (or ``spark.jars.packages``) bypasses the lookup.

The verifier's own digest reader (jvm/digest, see verifier/digest.py) is a jar named
``ureplicator-digest.jar``: in the same folders (the image puts it next to the connector), else
where ``make jars`` builds it in a source checkout (``jvm/digest/target/``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from ureplicator.common.errors import UReplicatorError

JARS_ENV = "UREPLICATOR_SPARK_JARS"
DIGEST_JAR = "ureplicator-digest.jar"
BUILT_DIGEST_JAR = Path(__file__).resolve().parents[1] / "jvm" / "digest" / "target" / DIGEST_JAR


class ConnectorMissing(UReplicatorError):
    """The connector jars are nowhere the verifier looks."""

    exit_status = 2


def candidates(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The folders searched after ``UREPLICATOR_SPARK_JARS``, in order."""
    env = os.environ if environ is None else environ
    cache = Path(env.get("UREPLICATOR_CACHE") or ".cache")
    return [Path(sys.prefix) / "share" / "ureplicator" / "spark-kafka", cache / "jvm" / "spark-kafka"]


def spark_jars(environ: Mapping[str, str] | None = None) -> list[str]:
    """Absolute paths of the connector jars; raises ConnectorMissing with where it looked."""
    env = os.environ if environ is None else environ
    explicit = env.get(JARS_ENV, "").strip()
    if explicit:
        jars = [str(j) for j in _expand(explicit)]
        if not jars:
            raise ConnectorMissing(f"{JARS_ENV}={explicit} names no jar (a folder of *.jar or a list of .jar files)")
        return jars
    for folder in candidates(env):
        jars = sorted(folder.resolve().glob("*.jar")) if folder.is_dir() else []
        if jars:
            return [str(j) for j in jars]
    looked = ", ".join(str(f) for f in candidates(env))
    raise ConnectorMissing(
        f"the Spark Kafka connector jars are missing: set {JARS_ENV} to their folder, pass "
        f"--conf spark.jars=... or --conf spark.jars.packages=..., or run `make install` in a source "
        f"checkout (looked in {looked})"
    )


def _expand(value: str) -> list[Path]:
    jars: list[Path] = []
    for item in value.replace(os.pathsep, ",").split(","):
        path = Path(item.strip()).expanduser()
        if path.is_dir():
            jars.extend(sorted(path.resolve().glob("*.jar")))
        elif path.suffix == ".jar" and path.is_file():
            jars.append(path.resolve())
    return jars


def digest_jar(jars: list[str]) -> str | None:
    """The digest reader's jar: among ``jars`` (the connector's folder), else the source checkout's build."""
    for jar in jars:
        if Path(jar).name == DIGEST_JAR:
            return jar
    return str(BUILT_DIGEST_JAR) if BUILT_DIGEST_JAR.is_file() else None
