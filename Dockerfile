# syntax=docker/dockerfile:1
#
# ureplicator-py images; the Helm chart (helm/ureplicator) runs them.
#
#   docker build -t ureplicator-py:0.1.0 .                                 # controller + worker
#   docker build --target verifier -t ureplicator-py-verifier:0.1.0 .     # + pyspark, Java 17, the Kafka connector
#
# `make image` builds both with buildah (no daemon), on a base made with debootstrap when no
# container registry can be reached (devtools/images.py), and puts the connector jars that
# `make install` fetched into jvm/jars/spark-kafka/ first, so no Maven runs in the build.
#
# Both install the tested set the way `make install` does: every dependency from the lock files
# (lock/image-runtime.txt, lock/image-verifier.txt: the same pins as requirements.lock, with hashes,
# devtools/pylock.py), then the package itself without resolving anything; not editable and
# without the dev extras (the verifier image adds the `verifier` extra: pyspark), and run
# as uid/gid 10001, which the chart's security contexts expect. The entrypoint is
# `ureplicator`, so a container's args are a subcommand: `controller --config F`,
# `worker --config F`, `verify --config F --output D --master M`.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a virtualenv holding the package and its pinned dependencies (no pyspark) ---------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
# A C compiler (and Python's headers, which Debian's python3 lacks) for the worker's C copy loop,
# worker/_native.c; in this stage only: the runtime images copy the virtualenv, not the compiler.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && { python -c "import os, sysconfig; raise SystemExit(not os.path.exists(sysconfig.get_paths()['include'] + '/Python.h'))" \
      || apt-get install -y --no-install-recommends python3-dev; } \
 && rm -rf /var/lib/apt/lists/* \
 && python -m venv /opt/ureplicator/venv
WORKDIR /src
# The locked dependencies first (their own layer: it changes only with the lock), build tools included.
COPY lock/image-runtime.txt lock/image-verifier.txt lock/
RUN /opt/ureplicator/venv/bin/pip install --progress-bar off --require-hashes --no-deps -r lock/image-runtime.txt
# setup.cfg reads README.md as the long description.
COPY setup.cfg setup.py pyproject.toml README.md ./
COPY ureplicator/ ureplicator/
COPY cli/ cli/
COPY common/ common/
COPY controller/ controller/
COPY reports/ reports/
COPY worker/ worker/
COPY verifier/ verifier/
COPY failover/ failover/
# pip byte-compiles while installing: the containers run on a read-only root filesystem.
RUN /opt/ureplicator/venv/bin/pip install --progress-bar off --no-deps --no-build-isolation . \
 && /opt/ureplicator/venv/bin/pip check

# --- build-verifier: the same virtualenv plus the `verifier` extra (pyspark) ------------------
FROM build AS build-verifier
RUN /opt/ureplicator/venv/bin/pip install --progress-bar off --require-hashes --no-deps -r lock/image-verifier.txt \
 && /opt/ureplicator/venv/bin/pip check

# --- jars: the Spark Kafka connector and the verifier's digest reader -------------------------
FROM build AS jars
COPY jvm/ jvm/
# `make image` copies the jars `make install` fetched into jvm/jars/spark-kafka/ (and the digest
# reader `make jars` built, when copied to jvm/jars/digest/). What is missing is made here with
# Maven from the same poms: the connector fetched from Maven Central, the digest reader compiled
# from jvm/digest (Debian's maven brings Java 17; slim images omit man pages, and some JRE
# post-install scripts fail without that folder).
RUN mkdir -p /opt/ureplicator/jars/spark-kafka \
 && if ! ls jvm/jars/spark-kafka/*.jar >/dev/null 2>&1 || ! ls jvm/jars/digest/*.jar >/dev/null 2>&1; then \
      mkdir -p /usr/share/man/man1 \
      && apt-get update \
      && apt-get install -y --no-install-recommends maven; \
    fi \
 && if ls jvm/jars/spark-kafka/*.jar >/dev/null 2>&1; then \
      cp jvm/jars/spark-kafka/*.jar /opt/ureplicator/jars/spark-kafka/; \
    else \
      mvn -B -q -f jvm/pom.xml -pl spark-kafka -am -DcacheDir=/opt/ureplicator/jars \
           dependency:copy-dependencies; \
    fi \
 && if ls jvm/jars/digest/*.jar >/dev/null 2>&1; then \
      cp jvm/jars/digest/ureplicator-digest.jar /opt/ureplicator/jars/spark-kafka/; \
    else \
      mvn -B -q -f jvm/digest/pom.xml package \
      && cp jvm/digest/target/ureplicator-digest.jar /opt/ureplicator/jars/spark-kafka/; \
    fi \
 && ls /opt/ureplicator/jars/spark-kafka/*.jar /opt/ureplicator/jars/spark-kafka/ureplicator-digest.jar

# --- base: what both runtime images share -----------------------------------------------------
FROM ${PYTHON_IMAGE} AS base
# tini as PID 1 forwards SIGTERM to ureplicator (whose handler starts the graceful hand-off)
# and reaps what Spark's launcher scripts leave behind. passwd: groupadd/useradd (the
# debootstrap minbase base lacks them; python's slim image has them).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini passwd \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 ureplicator \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/ureplicator \
      --shell /usr/sbin/nologin ureplicator
ENV PATH=/opt/ureplicator/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /home/ureplicator
USER 10001:10001
ENTRYPOINT ["tini", "--", "ureplicator"]
CMD ["--help"]

# --- verifier: + pyspark, a Java runtime for Spark and the Spark Kafka connector jars --------
FROM base AS verifier
USER root
# procps: Spark's launcher scripts call ps.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build-verifier /opt/ureplicator/venv /opt/ureplicator/venv
# Only the connector and the digest reader (ureplicator-digest.jar, in the same folder): Spark
# itself ships in the pyspark wheel, and Kafka/ZooKeeper/MirrorMaker are for the local test
# stack. verifier/connector.py reads UREPLICATOR_SPARK_JARS.
COPY --from=jars /opt/ureplicator/jars/spark-kafka/ /opt/ureplicator/jars/spark-kafka/
ENV UREPLICATOR_SPARK_JARS=/opt/ureplicator/jars/spark-kafka
# The class archive (verifier/cds.py): a cold `verify` JVM, the CronJob's, maps Spark's classes from it
# instead of loading and verifying them from the jars (less than half the start-up). Dumped here by a
# training run with this image's Java, pyspark and jars (the JVM ignores an archive of another classpath),
# after the jars are in place; no cluster needed. Read-only for the user, like the rest of /opt.
RUN cd /tmp \
 && python -m ureplicator.verifier.cds /opt/ureplicator/spark-classes.jsa \
 && rm -rf /tmp/*
ENV UREPLICATOR_SPARK_CDS=/opt/ureplicator/spark-classes.jsa
USER 10001:10001
CMD ["verify", "--help"]

# --- runtime (the default target): controller and worker, no Spark ---------------------------
FROM base AS runtime
COPY --from=build /opt/ureplicator/venv /opt/ureplicator/venv
