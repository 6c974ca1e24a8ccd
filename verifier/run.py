"""Verify a pipeline's topics once: snapshot watermarks, run the Spark passes, assemble the report."""

from __future__ import annotations

import contextlib
import functools
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from kazoo.exceptions import NoNodeError

from ureplicator.common import zk
from ureplicator.common.config import IMPLICIT_ROUTE, ClusterConfig, Config
from ureplicator.common.errors import UReplicatorError
from ureplicator.common.zkschema import Paths
from ureplicator.reports import model
from ureplicator.reports.model import CategoryResult, PartitionReport, Report, TopicReport, Watermarks
from ureplicator.verifier import checkpoint, digest, kafka_options, pass1, pass2, sparkjob
from ureplicator.verifier.checkpoint import Checkpoint, CheckpointFile, Decision, TopicIdentity
from ureplicator.verifier.pass1 import BucketPass, ClassAggregate
from ureplicator.verifier.pass2 import RecordPlan
from ureplicator.verifier.route import KafkaSide, RouteRule
from ureplicator.verifier.sparkjob import SparkUnavailable
from ureplicator.verifier.watermarks import Clusters, TopicMissing, TopicSnapshot

Progress = Callable[[str], None]


class VerifyError(UReplicatorError):
    """The verification could not run (exit status 2)."""

    exit_status = 2


def stderr_progress(message: str) -> None:
    print(f"verify: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Target:
    """A source topic and the destination topic it is mirrored to."""

    topic: str
    destination: str


def resolve_targets(config: Config, requested: Iterable[str], timeout_s: float = 15.0) -> list[Target]:
    """``--topic`` values (``name`` or ``source=destination``) or, when none, every topic in ZooKeeper."""
    requested = list(requested)
    explicit: list[Target] = []
    named: list[str] = []
    for item in requested:
        source, sep, destination = item.partition("=")
        if sep:
            if not source or not destination:
                raise VerifyError(f"--topic {item!r}: expected NAME or SOURCE=DESTINATION")
            explicit.append(Target(source, destination))
        else:
            named.append(item)
    if requested and not named:
        return explicit
    registered = _registered_topics(config, timeout_s)
    if not requested:
        return [Target(t, registered[t]) for t in sorted(registered)]
    unknown = [t for t in named if t not in registered]
    if unknown:
        raise VerifyError(
            f"not mirrored by pipeline {config.pipeline}: {', '.join(unknown)} "
            f"(ZooKeeper {config.zookeeper.connect}{config.root}/topics); "
            "use --topic SOURCE=DESTINATION for a topic ZooKeeper does not list"
        )
    by_name = {t.topic: t for t in explicit}
    by_name.update({t: Target(t, registered[t]) for t in named})
    return [by_name[t] for t in dict.fromkeys(s.partition("=")[0] for s in requested)]


def _registered_topics(config: Config, timeout_s: float) -> dict[str, str]:
    """source topic -> destination topic, read without writing anything to ZooKeeper."""
    client = zk.connect(config, timeout_s, read_only=True)
    try:
        records = zk.read_topics(client, Paths(config.root))
    except NoNodeError:
        raise VerifyError(
            f"pipeline {config.pipeline} has no state in ZooKeeper at {config.zookeeper.connect}{config.root}"
        ) from None
    finally:
        client.stop()
        client.close()
    return {name: record.destination for name, record in records.items()}


def kafka_side(name: str, cluster: ClusterConfig, extra: dict[str, str], progress: Progress) -> KafkaSide:
    options, unmapped = kafka_options.java_options(name, cluster.properties, extra)
    if unmapped:
        progress(
            f"{name} properties without a Java client equivalent (pass one with --kafka-option "
            f"{name}:KEY=VALUE if needed): {', '.join(unmapped)}"
        )
    return KafkaSide(cluster.bootstrap_servers, options, cluster.alias)


@dataclass(frozen=True)
class Incremental:
    """Where the checkpoint lives and when a full pass is due anyway."""

    path: Path
    full: bool = False  # --full: a complete pass now (the checkpoint is rewritten after it)
    full_every_s: float | None = 86_400.0  # --full-every: a full pass when the last is older; None never


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def verify(
    spark: Any,
    config: Config,
    clusters: Clusters,
    targets: list[Target],
    sides: tuple[KafkaSide, KafkaSide],
    group: str,
    bucket_size: int,
    progress: Progress = stderr_progress,
    incremental: Incremental | None = None,
) -> Report:
    """Verify every target topic; a topic that cannot be verified gets an error, the others go on.

    The topics are verified together: each is snapshotted and planned (full or incremental), then pass 1 of
    every topic, both sides, runs as one Spark job (with the digest reader; see ``_first_passes``), then each
    topic's pass 2, when needed, and its re-reads of partitions whose log start moved. Up to
    CONCURRENT_TOPICS topics are in that last part at once: their Spark jobs share the executors.
    With ``incremental``, each topic continues from the checkpoint file where it can (else a full pass,
    with the reason in the report), and the file is saved as soon as each topic's verdict is known.
    """
    started = datetime.now(timezone.utc)
    clock = time.monotonic()
    run_id = new_run_id(started)
    stored, unusable = _load_checkpoint(incremental, config, group, progress)
    saving = threading.Lock()  # one checkpoint file, saved from the topics' threads one at a time
    rule = route_rule(config)
    jobs = []
    for index, target in enumerate(targets, 1):
        job = _TopicJob(clusters, sides, target, group, bucket_size, f"[{index}/{len(targets)}] {target.topic}",
                        progress, rule)
        if incremental is not None:
            job.checkpointed = _Checkpointed(stored, incremental, unusable, started, saving)
        jobs.append(job)
    topics: list[TopicReport] = []
    for batch in _batches(jobs, TOPICS_PER_JOB):
        prepared = _concurrently(spark, [functools.partial(_prepare, job) for job in batch])
        _first_passes(spark, batch, prepared, progress)
        topics += _concurrently(spark, [functools.partial(_verify_topic, spark, job, ready)
                                        for job, ready in zip(batch, prepared, strict=True)])
    finished = datetime.now(timezone.utc)
    return Report(
        run_id=run_id,
        started_at=iso(started),
        finished_at=iso(finished),
        duration_s=time.monotonic() - clock,
        pipeline=config.pipeline,
        route=route_id(config),
        forward=config.forward,
        group=group,
        clusters={
            "source": {"alias": config.source.alias, "bootstrap_servers": config.source.bootstrap_servers},
            "destination": {
                "alias": config.destination.alias,
                "bootstrap_servers": config.destination.bootstrap_servers,
            },
        },
        spark={"master": str(spark.sparkContext.master), "version": str(spark.version),
               "reader": digest.reader_name(spark)},
        bucket_size=bucket_size,
        topics=topics,
    )


def route_id(config: Config) -> str:
    """The id of the route ``config`` is the view of (``default`` for a config without routes)."""
    return config.route_id or IMPLICIT_ROUTE


def route_rule(config: Config) -> RouteRule:
    """The route's forwarding policy, and whether its destination records need attributing (declared routes:
    the destination topic may also hold records produced there or copied by other routes)."""
    declared = config.declared_routes or route_id(config) != IMPLICIT_ROUTE  # or a route added through the API
    return RouteRule(config.source.alias, config.destination.alias, config.forward, declared)


def _load_checkpoint(
    incremental: Incremental | None, config: Config, group: str, progress: Progress
) -> tuple[Checkpoint, str | None]:
    """The stored checkpoint (or a fresh one) and, when the stored one cannot be used, why."""
    fresh = Checkpoint(config.pipeline, group, config.source.alias, config.destination.alias)
    if incremental is None:
        return fresh, None
    stored, problem = CheckpointFile(incremental.path).load()
    if stored is not None:
        mismatch = stored.matches(config.pipeline, group, config.source.alias, config.destination.alias)
        if mismatch is None:
            return stored, None
        problem = f"checkpoint {incremental.path} does not fit this run ({mismatch}): full pass"
    if problem is not None:
        progress(problem)
    return fresh, problem


_SAVING = threading.Lock()  # one checkpoint file, saved from the topics' threads one at a time


@dataclass
class _Checkpointed:
    """The checkpoint side of a run: what is stored, how to use it, the run's clock."""

    stored: Checkpoint
    options: Incremental
    unusable: str | None
    now: datetime
    saving: threading.Lock = field(default_factory=lambda: _SAVING)

    def record(self, topic: str, entry: checkpoint.TopicCheckpoint) -> None:
        """Keep one topic's next checkpoint and save the file now: a crash later keeps this topic's progress."""
        with self.saving:
            self.stored.topics[topic] = entry
            CheckpointFile(self.options.path).save(self.stored)


CONCURRENT_TOPICS = 4
# Topics whose pass 1 is one Spark job: the plan of a union of two reads per topic stays small.
TOPICS_PER_JOB = 64

T = TypeVar("T")


def _batches(items: list[T], size: int) -> list[list[T]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _concurrently(spark: Any, calls: list[Callable[[], T]]) -> list[T]:
    """Run the calls on up to CONCURRENT_TOPICS threads (one call: on this one); the results in the order of
    ``calls``. An error (or an interrupt) cancels the Spark jobs still running, so that the other threads end
    promptly, and is raised again."""
    if len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(max_workers=min(CONCURRENT_TOPICS, len(calls)), thread_name_prefix="verify") as pool:
        futures = [pool.submit(call) for call in calls]
        try:
            return [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            spark.sparkContext.cancelAllJobs()
            raise


_ATTEMPTS = 3


@dataclass
class _TopicJob:
    """Verify one topic: snapshot, plan (full or incremental), bucket pass, record pass, checkpoint."""

    clusters: Clusters
    sides: tuple[KafkaSide, KafkaSide]
    target: Target
    group: str
    bucket_size: int
    label: str
    progress: Progress
    rule: RouteRule | None = None
    checkpointed: _Checkpointed | None = None

    def run(self, spark: Any) -> TopicReport:
        """This topic alone: planned, pass 1 and the rest (``verify`` plans and runs pass 1 of many at once)."""
        return _verify_topic(spark, self, _prepare(self))


@dataclass
class _Prepared:
    """A topic's first attempt as planned before any Spark job: its snapshot (continued from the checkpoint
    where the decision says so), identity and decision; pass 1's result once ``_first_passes`` ran it."""

    clock: float
    snap: TopicSnapshot | None = None
    identity: TopicIdentity | None = None
    decision: Decision | None = None
    error: TopicMissing | None = None  # the topic cannot be verified: the snapshot said why
    buckets: BucketPass | None = None


def _prepare(job: _TopicJob) -> _Prepared:
    """Snapshot the topic and decide how much of it to verify; announce it."""
    ready = _Prepared(time.monotonic())
    target = job.target
    try:
        snap = job.clusters.snapshot(target.topic, target.destination, job.group)
        if job.checkpointed is not None:
            ready.identity = TopicIdentity(
                target.destination,
                job.clusters.topic_id("source", target.topic),
                job.clusters.topic_id("destination", target.destination),
            )
            ready.decision = _decide(job.checkpointed, target, ready.identity, snap)
            snap = snap.resumed(ready.decision.resume)
    except TopicMissing as exc:
        ready.error = exc
        return ready
    ready.snap = snap
    _announce(snap, job.label, job.progress, ready.decision)
    return ready


def _first_passes(spark: Any, jobs: list[_TopicJob], prepared: list[_Prepared], progress: Progress) -> None:
    """Pass 1 of every planned topic in one Spark job (the digest reader's; with Spark's Kafka source each topic
    runs its own, later). When that job fails, each topic runs its own pass 1 again, so that the failure is
    reported on the topic it belongs to and the other topics are verified."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    ready = [(job, r) for job, r in zip(jobs, prepared, strict=True) if r.snap is not None]
    if len(ready) < 2 or not digest.available(spark):
        return
    first = ready[0][0]
    try:
        with _heartbeat(spark, f"pass 1 of {len(ready)} topics", progress):
            found = pass1.bucket_passes(spark, first.sides[0], first.sides[1],
                                           [(r.snap, job.rule) for job, r in ready], first.bucket_size)
    except (PySparkException, Py4JError) as exc:
        progress(f"pass 1 of {len(ready)} topics together failed ({_first_line(exc)}); each topic on its own")
        return
    for (_, r), buckets in zip(ready, found, strict=True):
        r.buckets = buckets


def _verify_topic(spark: Any, job: _TopicJob, ready: _Prepared) -> TopicReport:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    target, label, progress = job.target, job.label, job.progress
    report = TopicReport(target.topic, target.destination)
    try:
        with _heartbeat(spark, label, progress):
            _passes(spark, job, report, ready)
    except TopicMissing as exc:
        report.error = str(exc)
    except (PySparkException, Py4JError) as exc:
        if sparkjob.is_connector_missing(exc):
            raise SparkUnavailable(
                "Spark's Kafka connector is not on the classpath: pass --packages "
                f"{sparkjob.CONNECTOR_PACKAGE} to spark-submit (or the jars with spark.jars)"
            ) from None
        report.error = f"Spark failed: {_first_line(exc)}"
    report.duration_s = time.monotonic() - ready.clock
    counts = {c: sum(p.counts[c] for p in report.partitions) for c in model.CATEGORIES}
    shown = ", ".join(f"{c} {n}" for c, n in counts.items() if n)
    detail = report.error or shown or "no differences"
    progress(f"{label}: {report.status} in {report.duration_s:.1f}s, {report.mode} ({detail})")
    return report


def _passes(spark: Any, job: _TopicJob, report: TopicReport, ready: _Prepared | None = None) -> None:
    """Pass 1 (run already when ``ready`` carries it), pass 2 when needed; again, for the partitions concerned
    only, when retention moved a log start meanwhile. Fills ``report`` and, for incremental runs, the topic's
    next checkpoint, saved at once."""
    ready = ready or _prepare(job)
    if ready.error is not None:
        raise ready.error
    clusters, sides, target, group = job.clusters, job.sides, job.target, job.group
    bucket_size, label, progress = job.bucket_size, job.label, job.progress
    clock = time.monotonic()
    identity, decision = ready.identity, ready.decision
    reports: dict[int, PartitionReport] = {}
    seen: dict[int, Watermarks] = {}  # each partition's watermarks as its final attempt read them
    first_unverified: dict[int, int] = {}
    read = {"source": 0, "destination": 0}
    only: set[int] | None = None  # after the first attempt: the partitions to verify again
    moved: dict[int, str] = {}
    for attempt in range(1, _ATTEMPTS + 1):
        if attempt == 1 and ready.snap is not None:
            snap, buckets = ready.snap, ready.buckets
        else:
            snap = clusters.snapshot(target.topic, target.destination, group)
            if decision is not None:
                snap = snap.resumed(decision.resume)
            if only is not None:
                snap = snap.only(only)
            _announce(snap, label, progress)
            buckets = None
        if buckets is None:
            buckets = pass1.bucket_pass(spark, sides[0], sides[1], snap, bucket_size, job.rule)
        plan = RecordPlan(
            mismatched=model.mismatched_buckets(buckets.source, buckets.destination),
            ordering=buckets.unordered,
            orphans={p for p, n in buckets.orphans.items() if n > 0},
            old=sorted(buckets.old),
        )
        findings: dict[int, dict[str, CategoryResult]] = {}
        if not plan.empty:
            progress(
                f"{label}: {len(plan.mismatched)} bucket(s) differ, {len(plan.ordering)} partition(s) "
                f"out of order, {len(plan.orphans)} with orphans: checking those records "
                f"({time.monotonic() - clock:.1f}s)"
            )
            findings = pass2.record_pass(spark, sides[0], sides[1], snap, bucket_size, plan, job.rule)
        reports.update({r.partition: r for r in _partition_reports(snap, buckets, plan, findings, group)})
        seen.update(snap.partitions)
        first_unverified = {p: o for p, o in first_unverified.items() if p not in snap.destination_ranges()}
        first_unverified.update(buckets.first_unverified)
        read["source"] += buckets.source_records
        read["destination"] += buckets.destination_records
        # Records deleted by retention while Spark read them look like losses or orphans; when every
        # bucket matched, what was read is consistent and a moved log start does not matter.
        moved = {} if plan.empty else _log_starts_moved(clusters, snap)
        if not moved or attempt == _ATTEMPTS:
            break
        only = set(moved)
        progress(f"{label}: log start moved during the run ({_said(moved)}); verifying those partitions again")
    for p, sides_moved in moved.items():
        if p in reports:
            reports[p].notes.append(f"log start kept moving during {_ATTEMPTS} attempts ({sides_moved})")
    report.partitions = [reports[p] for p in sorted(reports)]
    report.records_read = read
    if decision is None or identity is None or job.checkpointed is None:
        return
    report.mode, report.mode_reason = decision.mode, decision.reason
    for r in report.partitions:
        r.notes[:0] = decision.notes.get(r.partition, [])
    previous = job.checkpointed.stored.topics.get(target.topic)
    job.checkpointed.record(target.topic, checkpoint.advance(
        previous, identity, seen, {r.partition: r.status for r in report.partitions},
        first_unverified, full=decision.full, now=job.checkpointed.now,
    ))


def _decide(checkpointed: _Checkpointed, target: Target, identity: TopicIdentity, snap: TopicSnapshot) -> Decision:
    options = checkpointed.options
    return checkpoint.plan(
        checkpointed.stored.topics.get(target.topic), identity, snap.partitions, checkpointed.now,
        full=options.full, full_every_s=options.full_every_s, unusable=checkpointed.unusable,
    )


@contextlib.contextmanager
def _heartbeat(spark: Any, label: str, progress: Progress, interval_s: float = 30.0) -> Iterator[None]:
    """Every ``interval_s`` while a topic is verified, say how far Spark's running stages are."""
    stop = threading.Event()
    started = time.monotonic()

    def beat() -> None:
        tracker = None  # asked for at the first beat: most passes of a warm session end long before one
        while not stop.wait(interval_s):
            tracker = tracker or spark.sparkContext.statusTracker()
            done = total = 0
            for stage in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage)
                if info is not None:
                    done, total = done + info.numCompletedTasks, total + info.numTasks
            progress(f"{label}: working for {time.monotonic() - started:.0f}s, {done}/{total} tasks "
                     "of the running Spark stages done")

    thread = threading.Thread(target=beat, name="verify-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def _announce(snap: TopicSnapshot, label: str, progress: Progress, decision: Decision | None = None) -> None:
    verify_span = sum(w.verify_to - w.verify_from for w in snap.partitions.values())
    pending_span = sum(max(0, w.end - w.verify_to) for w in snap.partitions.values())
    arrow = f" -> {snap.destination}" if snap.destination != snap.topic else ""
    if decision is None:
        mode = ""
    elif decision.full:
        mode = f", full pass ({decision.reason})"
    else:
        resumed = len(decision.resume)
        mode = f", incremental ({resumed} of {len(snap.partitions)} partition(s) continue from the checkpoint)"
    progress(
        f"{label}{arrow}: {len(snap.partitions)} partition(s), offsets to verify {verify_span:,}, "
        f"pending {pending_span:,}{mode}"
    )


def _log_starts_moved(clusters: Clusters, snap: TopicSnapshot) -> dict[int, str]:
    """Partitions whose log start changed since the snapshot (retention or delete-records ran), and on which
    side ("source 3", "destination 3", or both).

    Compared with the log starts the snapshot read, never with where this run started reading: an
    incremental run reads the destination from the checkpoint's offset, far above its log start.
    """
    moved: dict[int, list[str]] = {}
    now = clusters.log_starts("source", snap.topic, sorted(snap.partitions))
    for p, w in sorted(snap.partitions.items()):
        if now.get(p, w.log_start) != w.log_start:
            moved.setdefault(p, []).append(f"source {p}")
    starts = {p: w.destination_log_start for p, w in snap.partitions.items() if w.destination_log_start is not None}
    starts.update({p: start for p, (start, _) in snap.destination_only.items()})
    now = clusters.log_starts("destination", snap.destination, sorted(starts))
    for p, start in sorted(starts.items()):
        if now.get(p, start) != start:
            moved.setdefault(p, []).append(f"destination {p}")
    return {p: ", ".join(said) for p, said in sorted(moved.items())}


def _said(moved: dict[int, str]) -> str:
    return ", ".join(moved.values())


def _spans(aggregates: list[ClassAggregate]) -> list[model.Range]:
    return model.merge_ranges([a.first, a.last] for a in aggregates if a.first is not None and a.last is not None)


def _partition_reports(
    snap: TopicSnapshot,
    buckets: BucketPass,
    plan: RecordPlan,
    findings: dict[int, dict[str, CategoryResult]],
    group: str,
) -> list[PartitionReport]:
    reports: dict[int, PartitionReport] = {}
    for p, w in snap.partitions.items():
        reports[p] = PartitionReport(p, w, notes=w.notes(group))
    for p, (start, end) in snap.destination_only.items():
        w = Watermarks(p, 0, 0, None, start, end)
        reports[p] = PartitionReport(p, w, notes=[f"the source topic has no partition {p}"])
    keys = set(buckets.source) | set(buckets.destination)
    mismatched = set(plan.mismatched)
    for p, report in reports.items():
        if buckets.foreign.get(p):
            report.notes.append(f"{buckets.foreign[p]} destination record(s) not written by this route (produced "
                                "on the destination, or copied by another route): not this route's to verify")
        report.verified_records = buckets.verified.get(p, 0)
        report.buckets = sum(1 for k in keys if k[0] == p)
        report.buckets_mismatched = sum(1 for k in mismatched if k[0] == p)
        for category, result in findings.get(p, {}).items():
            report.categories[category] = result
        informational = (
            (model.PENDING, buckets.pending), (model.EXPIRED, buckets.expired), (model.SKIPPED, buckets.skipped)
        )
        for category, aggregates in informational:
            found = aggregates.get(p, [])
            if found:
                ranges, truncated = model.cap_ranges(_spans(found))
                report.categories[category] = CategoryResult(
                    count=sum(a.count for a in found), ranges=ranges, ranges_truncated=truncated
                )
    return [reports[p] for p in sorted(reports)]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__
