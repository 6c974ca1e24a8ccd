# syntax=docker/dockerfile:1
#
# ureplicator-py images; the Helm chart (helm/ureplicator) runs them.
#
#   docker build -t ureplicator-py:0.1.0 .                                 # controller + worker
#   docker build --target verifier -t ureplicator-py-verifier:0.1.0 .     # + Java 17 and the Spark Kafka connector
#
# Both install the package the way `make install` does (pip, from setup.cfg) but not editable
# and without the dev extras, and run as uid/gid 10001, which the chart's security contexts
# expect. The entrypoint is `ureplicator`, so a container's args are a subcommand:
# `controller --config F`, `worker --config F`, `verify --config F --output D --master M`.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a virtualenv holding the package and its pinned dependencies ---------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/ureplicator/venv \
 && /opt/ureplicator/venv/bin/pip install --upgrade pip
WORKDIR /src
# setup.cfg reads README.md as the long description.
COPY setup.cfg pyproject.toml README.md ./
COPY common/ common/
COPY controller/ controller/
COPY worker/ worker/
COPY verifier/ verifier/
COPY failover/ failover/
# pip byte-compiles while installing: the containers run on a read-only root filesystem.
RUN /opt/ureplicator/venv/bin/pip install --progress-bar off .

# --- jars: the pinned JVM artifacts, fetched by the same step `make install` runs ------------
FROM build AS jars
# Debian's maven brings Java 17 (default-jre-headless), which it needs to run. Slim images
# omit man pages, and some JRE post-install scripts fail without this folder.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends maven \
 && rm -rf /var/lib/apt/lists/*
COPY jvm/ jvm/
ENV UREPLICATOR_CACHE=/opt/ureplicator/cache
# Run from /src so common.jvm finds jvm/pom.xml next to it (the installed copy has no poms).
RUN /opt/ureplicator/venv/bin/python -m common.jvm fetch

# --- base: what both runtime images share -----------------------------------------------------
FROM ${PYTHON_IMAGE} AS base
# tini as PID 1 forwards SIGTERM to ureplicator (whose handler starts the graceful hand-off)
# and reaps what Spark's launcher scripts leave behind.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 ureplicator \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/ureplicator \
      --shell /usr/sbin/nologin ureplicator
COPY --from=build /opt/ureplicator/venv /opt/ureplicator/venv
ENV PATH=/opt/ureplicator/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /home/ureplicator
USER 10001:10001
ENTRYPOINT ["tini", "--", "ureplicator"]
CMD ["--help"]

# --- verifier: + a Java runtime for Spark and the Spark Kafka connector jars -----------------
FROM base AS verifier
USER root
# procps: Spark's launcher scripts call ps.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
# Only the connector: Spark itself ships in the pyspark wheel, and Kafka/ZooKeeper/MirrorMaker
# are for the local test stack. common.jvm.classpath("spark-kafka") finds them here.
ENV UREPLICATOR_CACHE=/opt/ureplicator/cache
COPY --from=jars /opt/ureplicator/cache/jvm/spark-kafka/ /opt/ureplicator/cache/jvm/spark-kafka/
USER 10001:10001
CMD ["verify", "--help"]

# --- runtime (the default target): controller and worker --------------------------------------
FROM base AS runtime
