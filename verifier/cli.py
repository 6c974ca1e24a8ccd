"""The ``verify`` command: prove per partition that the destination holds the source's records, once or periodically.

Exit status: 0 OK or WARN (duplicates only), 1 FAIL, 2 could not run (the
reason is on stderr: config, ZooKeeper or a cluster unreachable, Spark or its
Kafka connector missing, a topic that does not exist). Progress goes to
stderr, a one-line verdict per run to stdout, reports to ``--output``.

One run verifies one route (``--route``; ``--all-routes`` each in turn). The
implicit route of a config without ``routes`` (``default``) keeps its reports
and checkpoint in ``--output`` itself, as before routes; a declared route keeps
them in ``--output/<route id>/`` (what the controller serves for
``/routes/<id>/verification``). ``--deployment`` runs the deployment-level
check instead (verifier/deployment.py).

Wiring into another argparse tree (``ureplicator verify``)::

    verify = subparsers.add_parser("verify", help=...)
    verifier.cli.add_arguments(verify)
    verify.set_defaults(func=verifier.cli.run)   # run(args) -> exit status
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ureplicator.common import config as config_module
from ureplicator.common import logs
from ureplicator.common.errors import ConfigError, UReplicatorError
from ureplicator.reports import model
from ureplicator.reports.store import ReportStore, error_entry
from ureplicator.verifier import checkpoint, kafka_options

DESCRIPTION = (
    "Prove per partition that the destination holds every record the replicator committed, exactly once, "
    "unchanged and in order. Exit status 0 OK/WARN, 1 FAIL, 2 could not run."
)
EXIT_STATUS = {model.OK: 0, model.WARN: 0, model.FAIL: 1, model.ERROR: 2}
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_INTERVAL = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_interval(text: str) -> float:
    """``90``, ``30s``, ``10m``, ``1h30m`` -> seconds (a bare number is seconds)."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        seconds = float(text)
    else:
        parts = _INTERVAL.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 30s, 10m, 1h30m)")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise argparse.ArgumentTypeError("the interval must be positive")
    return seconds


def parse_full_every(text: str) -> float | None:
    """``--full-every``: a duration, or ``never``."""
    if text.strip().lower() == "never":
        return None
    return parse_interval(text)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="pipeline YAML config (UREPLICATOR_* variables override it)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--route", "-r", default="", metavar="ID",
                       help="the route to verify (default: the deployment's only route); its reports and "
                       "checkpoint go to OUTPUT/ID/ (the implicit route of a config without routes: OUTPUT)")
    which.add_argument("--all-routes", action="store_true",
                       help="verify every route (the config's and those added through the REST API), one after "
                       "another; the exit status is the worst route's")
    which.add_argument("--deployment", action="store_true",
                       help="check the whole deployment instead: every origin record exactly once on every "
                       "cluster its routes should bring it to, and nowhere else (docs/verification.md)")
    parser.add_argument(
        "--topic", "-t", action="append", default=[], metavar="TOPIC[=DESTINATION]",
        help="topic to verify (repeatable); default every topic the pipeline mirrors (from ZooKeeper). "
        "SOURCE=DESTINATION names the destination topic without asking ZooKeeper",
    )
    parser.add_argument(
        "--master", default=None,
        help="Spark master URL (default: the one spark-submit chose, else local[*])",
    )
    parser.add_argument("--output", "-o", type=Path, default=Path("verification"),
                        help="reports directory (default: ./verification)")
    parser.add_argument("--every", type=parse_interval, default=None, metavar="INTERVAL",
                        help="verify periodically, e.g. 10m; stop with SIGTERM/Ctrl-C")
    parser.add_argument("--runs", type=_positive, default=None,
                        help="with --every: stop after this many runs")
    parser.add_argument("--group", default=None,
                        help="consumer group holding the replicator's offsets (default ureplicator.<pipeline>)")
    parser.add_argument("--bucket-size", type=_positive, default=10_000,
                        help="offsets per comparison bucket (default 10000); a mismatch re-reads its buckets only")
    parser.add_argument("--conf", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="Spark setting (repeatable), e.g. spark.driver.memory=2g")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="SIDE:KEY=VALUE",
                        help="Java Kafka client setting for source or destination (repeatable)")
    parser.add_argument("--keep-runs", type=_positive, default=500,
                        help="run reports to keep in OUTPUT/runs (history.jsonl keeps every run)")
    parser.add_argument("--checkpoint", type=Path, default=None, metavar="FILE",
                        help="where runs record how far they verified (default OUTPUT/checkpoint.json); "
                        "a run continues from it and reads only new records")
    parser.add_argument("--full", action="store_true",
                        help="verify every retained record, ignoring the checkpoint (it is rewritten after)")
    parser.add_argument("--full-every", type=parse_full_every, default=86_400.0, metavar="DURATION",
                        help="a full pass when the last one is older than this (default 1d; 'never' to disable)")
    parser.add_argument("--timeout", type=float, default=15.0,
                        help="seconds to wait for ZooKeeper and the clusters' admin requests")


def main(argv: list[str] | None = None) -> int:
    """``python -m ureplicator.verifier``: parse, set up logging, run."""
    parser = argparse.ArgumentParser(prog="python -m ureplicator.verifier", description=DESCRIPTION)
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logs.setup(level=args.log_level)
    return run(args)


PYSPARK_MISSING = "pyspark is not installed: pip install 'ureplicator-py[verifier]' (or use the verifier image)"


def pyspark_installed() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return True


def run(args: argparse.Namespace) -> int:
    """Run once, or every ``args.every`` seconds; returns the exit status of the last run."""
    if not pyspark_installed():  # an optional extra: the controller/worker install leaves it out
        print(f"ureplicator verify: {PYSPARK_MISSING}", file=sys.stderr)
        return 2
    sessions = _SessionCache(args.master, dict(args.conf))
    try:
        if args.every is None:
            return run_once(args, sessions)
        return _periodic(args, sessions)
    except KeyboardInterrupt:
        print("ureplicator verify: interrupted", file=sys.stderr)
        return 130
    finally:
        sessions.stop()


class _SessionCache:
    """One SparkSession for the whole process, created on first use.

    ``prefetch`` starts creating it in the background: the JVM and Spark start while the run reads its
    config, ZooKeeper and the clusters' offsets, which takes a second or two off start-to-verdict.
    """

    def __init__(self, master: str | None, conf: dict[str, str]) -> None:
        from pyspark import SparkContext

        self.master = master
        self.conf = conf
        self.spark: Any = None
        self._starting: threading.Thread | None = None
        self._failure: BaseException | None = None
        # A session that existed before (the caller's, e.g. a test's) is not ours to stop.
        self._owned = SparkContext._active_spark_context is None

    def stop(self) -> None:
        """Stop the session this process started (executors released, Spark's shutdown hooks run)."""
        if self._starting is not None:
            self._starting.join()
        if self.spark is not None and self._owned:
            try:
                self.spark.stop()
            except Exception:  # noqa: BLE001 - the JVM may be gone already (a second signal)
                pass
            self.spark = None

    def prefetch(self) -> None:
        if self.spark is None and self._starting is None:
            self._starting = threading.Thread(target=self._start, name="spark-start", daemon=True)
            self._starting.start()

    def _start(self) -> None:
        from ureplicator.verifier import sparkjob
        from ureplicator.verifier.run import stderr_progress

        started = time.monotonic()
        try:
            self.spark = sparkjob.session(self.master, self.conf, own_archive=True)
        except BaseException as exc:  # noqa: BLE001 - raised again by the caller's thread
            self._failure = exc
            return
        from ureplicator.verifier import cds

        options = str(self.spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", ""))
        mapped = re.search(r"-XX:SharedArchiveFile=(\S+)", options)
        dumping = "-XX:ArchiveClassesAtExit=" in options
        shared = (f", classes from {mapped.group(1)}" if mapped else
                  f", its classes archived at exit for the next run ({cds.CDS_ENV}=off: never)" if dumping else "")
        stderr_progress(f"Spark {self.spark.version} ({self.spark.sparkContext.master}) started in "
                        f"{time.monotonic() - started:.1f}s{shared}; this process keeps it for every run")

    def __call__(self) -> Any:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure
        if self.spark is None:
            self._start()
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure
        return self.spark


def route_output(output: Path, route_id: str) -> Path:
    """Where a route's reports and checkpoint live: OUTPUT for the implicit route, OUTPUT/<id> for another."""
    return output if route_id in ("", config_module.IMPLICIT_ROUTE) else output / route_id


def routes_to_verify(args: argparse.Namespace, config: config_module.Config) -> list[config_module.Config]:
    """The route views this run verifies: ``--route``, every route with ``--all-routes``, else the only one."""
    from ureplicator.common import zk

    if args.all_routes:
        if args.checkpoint is not None or args.group is not None:
            raise ConfigError("--all-routes", "--checkpoint and --group name one route's; each route keeps its "
                                              "own (OUTPUT/<route id>/checkpoint.json, its own group)")
        views = [config_module.route_view(config, r.id) for r in config.routes]
        known = {r.id for r in config.routes}
        for route_id in sorted(set(_registered_routes(config, args.timeout)) - known):
            views.append(zk.route_config(config, route_id, args.timeout))
        return views
    if args.route:
        try:
            return [zk.route_config(config, args.route, args.timeout)]
        except ConfigError as exc:
            ids = ", ".join(r.id for r in config.routes)
            raise ConfigError("--route", f"{exc.reason} (the config's routes: {ids})") from None
    if len(config.routes) > 1:
        ids = ", ".join(r.id for r in config.routes)
        raise ConfigError("--route", f"this deployment has {len(config.routes)} routes ({ids}): name one with "
                                     "--route ID, or verify each with --all-routes")
    return [config]


def _registered_routes(config: config_module.Config, timeout_s: float) -> list[str]:
    """Route ids in the deployment's registry (routes added through ``POST /routes``)."""
    from ureplicator.common import zk
    from ureplicator.common.zkschema import Paths

    client = zk.connect(config, timeout_s, read_only=True)
    try:
        return sorted(zk.read_routes(client, Paths(config.pipeline_root)))
    finally:
        client.stop()
        client.close()


def run_once(args: argparse.Namespace, spark: Callable[[], Any]) -> int:
    """One run: the deployment check, or each chosen route in turn; the worst exit status."""
    from ureplicator.verifier.run import iso, new_run_id

    if getattr(args, "deployment", False):
        from ureplicator.verifier import deployment

        return deployment.run(args, spark)
    started = datetime.now(timezone.utc)
    if isinstance(spark, _SessionCache):
        spark.prefetch()
    config = None
    try:
        config = config_module.load(args.config)
        logs.register_secrets(config_module.secret_values(config))
        views = routes_to_verify(args, config)
    except (UReplicatorError, OSError) as exc:
        print(f"ureplicator verify: {exc}", file=sys.stderr, flush=True)
        if config is None or not config.declared_routes:  # a declared route's failure is not the implicit one's
            try:
                ReportStore(args.output).append(error_entry(new_run_id(started), iso(started),
                                                            iso(datetime.now(timezone.utc)), 0.0, str(exc)))
            except OSError:
                pass  # the reports directory itself is the problem; stderr has the reason
        return 2
    statuses = [_run_route(args, spark, view, len(views) > 1) for view in views]
    return max(statuses, default=0)


def _run_route(args: argparse.Namespace, spark: Callable[[], Any], config: config_module.Config, named: bool) -> int:
    # Imported here so that building the argument parser (``ureplicator --help``) stays cheap.
    from confluent_kafka import KafkaException

    from ureplicator.verifier import run as runner
    from ureplicator.verifier.run import iso, new_run_id, stderr_progress
    from ureplicator.verifier.watermarks import Clusters

    started = datetime.now(timezone.utc)
    clock = time.monotonic()
    route_id = runner.route_id(config)
    output = route_output(args.output, route_id)
    store = ReportStore(output)
    prefix = f"route {route_id}: " if named else ""
    if named:
        stderr_progress(f"route {route_id} ({config.source.alias} -> {config.destination.alias}, "
                        f"forward {config.forward}), reports in {output}")
    try:
        extra: dict[str, dict[str, str]] = {"source": {}, "destination": {}}
        for item in args.kafka_option:
            side, key, value = kafka_options.parse_option(item)
            extra[side][key] = value
        sides = (
            runner.kafka_side("source", config.source, extra["source"], stderr_progress),
            runner.kafka_side("destination", config.destination, extra["destination"], stderr_progress),
        )
        targets = runner.resolve_targets(config, args.topic, args.timeout)
        if not targets:
            stderr_progress(f"pipeline {config.pipeline} mirrors no topics")
        clusters = Clusters(config.source, config.destination, args.timeout)
        clusters.check_reachable()
        group = args.group or config.consumer_group
        incremental = runner.Incremental(
            args.checkpoint or output / checkpoint.FILE_NAME, full=args.full, full_every_s=args.full_every
        )
        with checkpoint.CheckpointFile(incremental.path).exclusive():
            report = runner.verify(
                spark(), config, clusters, targets, sides, group, args.bucket_size, incremental=incremental
            )
        document = report.to_dict()
        path = store.save(document, keep_runs=args.keep_runs)
    except (UReplicatorError, OSError, KafkaException) as exc:
        # KafkaException: librdkafka refused a client property of the config.
        reason = str(exc.args[0]) if isinstance(exc, KafkaException) and exc.args else str(exc)
        print(f"ureplicator verify: {prefix}{reason}", file=sys.stderr, flush=True)
        try:
            store.append(error_entry(new_run_id(started), iso(started), iso(datetime.now(timezone.utc)),
                                     time.monotonic() - clock, reason))
        except OSError:
            pass  # the reports directory itself is the problem; stderr has the reason
        return 2
    totals = document["totals"]
    print(
        f"{prefix}{document['status']}: {totals['verified_records']:,} records verified in "
        f"{totals['topics']} topic(s), "
        f"{sum(totals['partitions'].values())} partition(s) ({totals['partitions']['FAIL']} FAIL, "
        f"{totals['partitions']['WARN']} WARN) in {document['duration_s']:.1f}s; report {path}",
        flush=True,
    )
    return EXIT_STATUS[document["status"]]


def _periodic(args: argparse.Namespace, spark: Callable[[], Any]) -> int:
    from ureplicator.verifier.run import stderr_progress

    stop = threading.Event()

    def request_stop(signum: int, frame: Any) -> None:
        if stop.is_set():  # second signal: do not wait for the running Spark job
            raise KeyboardInterrupt
        stderr_progress("stopping after the current run (send again to stop now)")
        stop.set()

    previous = signal.signal(signal.SIGTERM, request_stop)
    try:
        runs = 0
        status = 0
        while True:
            clock = time.monotonic()
            status = run_once(args, spark)
            runs += 1
            if stop.is_set() or (args.runs is not None and runs >= args.runs):
                return status
            wait = max(0.0, args.every - (time.monotonic() - clock))
            stderr_progress(f"next run in {wait:.0f}s")
            if stop.wait(wait):
                return status
    finally:
        signal.signal(signal.SIGTERM, previous)
