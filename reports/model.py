"""The verification report model: watermarks, categories, offset ranges, status rules (pure, no I/O).

Everything here is plain data and arithmetic so it can be unit-tested and
reused by the Spark edge (``verifier.pass1``, ``verifier.pass2``), the report writers
(``reports.store``, ``reports.html``) and the controller's API.

Categories, per source partition (see docs/verification.md):

========== ============================================================ ==========
category   meaning                                                      offsets of
========== ============================================================ ==========
MISSING    source record in the verified range, not in the destination  source
DUPLICATE  extra destination copy of a verified source record           source
CORRUPTED  destination copy whose content hash differs from the source  source
ORPHAN     destination record that maps to no verified source record    destination
REORDERED  first copy whose source offset is below the previous one's   source
PENDING    source record at or above the watermark (not verified yet)   source
EXPIRED    destination record whose source offset is below log start    source
COMPACTED  record one side no longer holds while it holds a later       source
           record with the same key (compacted topics only)
SKIPPED    source record the route's forwarding policy does not copy    source
           (transit: its urep origin is the destination; origin: its
           urep origin is another cluster than the source)
========== ============================================================ ==========

A partition FAILs on MISSING, CORRUPTED, ORPHAN or REORDERED; duplicates
alone are a WARNing (at-least-once delivery allows them); PENDING, EXPIRED,
COMPACTED and SKIPPED are information.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

SCHEMA_VERSION = 2  # 2: hash version 2, full/incremental runs and the ranges they read

MISSING = "MISSING"
DUPLICATE = "DUPLICATE"
CORRUPTED = "CORRUPTED"
ORPHAN = "ORPHAN"
REORDERED = "REORDERED"
PENDING = "PENDING"
EXPIRED = "EXPIRED"
COMPACTED = "COMPACTED"
SKIPPED = "SKIPPED"
CATEGORIES: tuple[str, ...] = (
    MISSING, DUPLICATE, CORRUPTED, ORPHAN, REORDERED, PENDING, EXPIRED, COMPACTED, SKIPPED
)
INFORMATION: frozenset[str] = frozenset({PENDING, EXPIRED, COMPACTED, SKIPPED})
FAILING: frozenset[str] = frozenset({MISSING, CORRUPTED, ORPHAN, REORDERED})
WARNING: frozenset[str] = frozenset({DUPLICATE})
# Which offsets a category's ranges list: an orphan may have no readable source offset.
RANGES_OF: dict[str, str] = {c: ("destination" if c == ORPHAN else "source") for c in CATEGORIES}

OK = "OK"
WARN = "WARN"
FAIL = "FAIL"
ERROR = "ERROR"  # a topic could not be verified
# Worst wins; ERROR (could not verify) ranks below FAIL (verified and found broken).
STATUS_ORDER: tuple[str, ...] = (OK, WARN, ERROR, FAIL)
STATUS_CODE: dict[str, int] = {OK: 0, WARN: 1, FAIL: 2, ERROR: 3}

MAX_SAMPLES = 20
MAX_RANGES = 1000

HASH_SPEC: dict[str, Any] = {
    "version": 2,
    "algorithm": "xxhash64",
    "seed": 42,
    "input": (
        "Spark xxhash64 chained over: bool key is null | key bytes (skipped when null) | bool value is null | "
        "value bytes (skipped when null) | i64 timestamp in ms | i32 number of headers except 'urep' | "
        "per such header in record order: name UTF-8, value bytes (skipped when null) | per header whose "
        "value is null, its i32 1-based position"
    ),
    "byte_order": "little-endian",
    "bucket_hash": "xxhash64(content_hash, source_offset) with Spark's seed chaining",
    "bucket_aggregates": ["count", "exact sum(bucket_hash) from two BIGINT sums of its 32-bit halves",
                          "bit_xor(bucket_hash)"],
    "hash_format": "16 lower-case hex digits of the unsigned 64-bit value",
}

Range = list[int]  # [first, last], both inclusive


# --- offsets ---------------------------------------------------------------------------------


def compress(offsets: Iterable[int]) -> list[Range]:
    """Sorted, de-duplicated offsets as inclusive ranges: 5,6,7,9 -> [[5, 7], [9, 9]]."""
    ranges: list[Range] = []
    for offset in sorted(set(offsets)):
        if ranges and offset == ranges[-1][1] + 1:
            ranges[-1][1] = offset
        else:
            ranges.append([offset, offset])
    return ranges


def merge_ranges(ranges: Iterable[Iterable[int]]) -> list[Range]:
    """Union of inclusive ranges; overlapping and adjacent ones are joined."""
    merged: list[Range] = []
    for first, last in sorted((int(a), int(b)) for a, b in ranges):
        if first > last:
            raise ValueError(f"range [{first}, {last}] ends before it starts")
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return merged


def cap_ranges(ranges: list[Range], limit: int = MAX_RANGES) -> tuple[list[Range], bool]:
    """At most ``limit`` ranges (the lowest) and whether some were left out."""
    return ranges[:limit], len(ranges) > limit


def hash_hex(value: int | None) -> str | None:
    """A signed 64-bit hash (Spark's bigint) as 16 hex digits of its unsigned value."""
    if value is None:
        return None
    return f"{int(value) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


# --- watermarks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Watermarks:
    """One source partition's offsets as read before verifying it.

    ``committed`` is the replicator group's committed offset (None when it has
    none); the destination fields are None when the destination partition does
    not exist.
    """

    partition: int
    log_start: int
    end: int
    committed: int | None
    destination_log_start: int | None = None
    destination_end: int | None = None
    # From the checkpoint of earlier runs (None: a full pass): source offsets below ``resume_from``
    # were verified already, and copies of offsets at or above it sit at or above ``destination_resume_from``.
    resume_from: int | None = None
    destination_resume_from: int | None = None

    @property
    def watermark(self) -> int:
        """W = min(end, committed), never below the log start: records below W must be mirrored."""
        if self.committed is None:
            return self.log_start
        return max(self.log_start, min(self.end, self.committed))

    @property
    def incremental(self) -> bool:
        return self.resume_from is not None

    @property
    def verify_from(self) -> int:
        """First source offset this run verifies: the log start, or where the checkpoint left off."""
        return self.log_start if self.resume_from is None else max(self.log_start, self.resume_from)

    @property
    def verify_to(self) -> int:
        """End of this run's verified range; never below ``verify_from`` (a commit that went back verifies nothing)."""
        return max(self.verify_from, self.watermark)

    @property
    def verified_range(self) -> tuple[int, int]:
        return self.verify_from, self.verify_to

    @property
    def destination_range(self) -> tuple[int, int] | None:
        """[start, end) of the destination partition this run reads; None when it does not exist."""
        if self.destination_end is None or self.destination_log_start is None:
            return None
        start = self.destination_log_start
        if self.destination_resume_from is not None:
            start = max(start, min(self.destination_resume_from, self.destination_end))
        return start, self.destination_end

    def notes(self, group: str) -> list[str]:
        notes = []
        if self.committed is None:
            notes.append(f"group {group} has no committed offset: nothing verified, everything pending")
        elif self.committed < self.log_start:
            notes.append(
                f"committed offset {self.committed} is below the source log start {self.log_start}: "
                f"records in [{self.committed}, {self.log_start}) expired before they were mirrored"
            )
        elif self.committed > self.end:
            notes.append(f"committed offset {self.committed} is above the source end offset {self.end}")
        if self.destination_end is None:
            notes.append("the destination partition does not exist")
        return notes


# --- bucket aggregates -----------------------------------------------------------------------


@dataclass(frozen=True)
class BucketAggregate:
    """count, exact sum and xor of the bucket hashes of one (partition, offset bucket)."""

    count: int
    total: Decimal
    xor: int


BucketKey = tuple[int, int]  # (partition, bucket number)


def mismatched_buckets(
    source: Mapping[BucketKey, BucketAggregate], destination: Mapping[BucketKey, BucketAggregate]
) -> list[BucketKey]:
    """Buckets whose aggregates differ or exist on one side only, sorted."""
    keys = set(source) | set(destination)
    return sorted(k for k in keys if source.get(k) != destination.get(k))


def bucket_span(bucket: int, bucket_size: int, low: int, high: int) -> tuple[int, int]:
    """The offsets [start, end) of a bucket, clipped to [low, high)."""
    return max(low, bucket * bucket_size), min(high, (bucket + 1) * bucket_size)


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One example record of a category; a field is None when that side has no such record."""

    source_partition: int | None
    source_offset: int | None
    destination_offset: int | None
    source_hash: str | None
    destination_hash: str | None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_partition": self.source_partition,
            "source_offset": self.source_offset,
            "destination_offset": self.destination_offset,
            "source_hash": self.source_hash,
            "destination_hash": self.destination_hash,
            "note": self.note,
        }


@dataclass
class CategoryResult:
    count: int = 0
    ranges: list[Range] = field(default_factory=list)
    ranges_truncated: bool = False
    samples: list[Sample] = field(default_factory=list)

    def to_dict(self, category: str) -> dict[str, Any]:
        return {
            "count": self.count,
            "ranges_of": RANGES_OF[category],
            "ranges": [list(r) for r in self.ranges],
            "ranges_truncated": self.ranges_truncated,
            "samples": [s.to_dict() for s in self.samples[:MAX_SAMPLES]],
        }


def partition_status(counts: Mapping[str, int]) -> str:
    """FAIL on any loss, corruption, orphan or reordering; WARN on duplicates only; else OK."""
    if any(counts.get(c, 0) > 0 for c in FAILING):
        return FAIL
    if any(counts.get(c, 0) > 0 for c in WARNING):
        return WARN
    return OK


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=STATUS_ORDER.index, default=OK)


@dataclass
class PartitionReport:
    partition: int
    watermarks: Watermarks
    verified_records: int = 0
    buckets: int = 0
    buckets_mismatched: int = 0
    categories: dict[str, CategoryResult] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def category(self, name: str) -> CategoryResult:
        return self.categories.setdefault(name, CategoryResult())

    @property
    def counts(self) -> dict[str, int]:
        return {c: self.categories[c].count if c in self.categories else 0 for c in CATEGORIES}

    @property
    def status(self) -> str:
        return partition_status(self.counts)

    def to_dict(self) -> dict[str, Any]:
        w = self.watermarks
        start, end = w.verified_range
        return {
            "partition": self.partition,
            "status": self.status,
            "source": {"log_start": w.log_start, "end": w.end},
            "destination": (
                None
                if w.destination_end is None
                else {"log_start": w.destination_log_start, "end": w.destination_end}
            ),
            "committed": w.committed,
            "watermark": w.watermark,
            "mode": "incremental" if w.incremental else "full",
            "verified_range": [start, end],
            "destination_range": None if w.destination_range is None else list(w.destination_range),
            "verified_records": self.verified_records,
            "buckets": {"total": self.buckets, "mismatched": self.buckets_mismatched},
            "counts": self.counts,
            "categories": {c: self.categories.get(c, CategoryResult()).to_dict(c) for c in CATEGORIES},
            "notes": list(self.notes),
        }


@dataclass
class TopicReport:
    topic: str
    destination: str
    partitions: list[PartitionReport] = field(default_factory=list)
    error: str | None = None
    duration_s: float = 0.0
    mode: str = "full"  # or "incremental": some partitions continued from the checkpoint
    mode_reason: str | None = None  # why a full pass, when a checkpoint was in use
    records_read: dict[str, int] = field(default_factory=lambda: {"source": 0, "destination": 0})

    @property
    def status(self) -> str:
        if self.error is not None:
            return ERROR
        return worst(p.status for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "destination": self.destination,
            "status": self.status,
            "error": self.error,
            "duration_s": round(self.duration_s, 3),
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "records_read": dict(self.records_read),
            "partitions": [p.to_dict() for p in sorted(self.partitions, key=lambda p: p.partition)],
        }


@dataclass
class Report:
    run_id: str
    started_at: str
    finished_at: str
    duration_s: float
    pipeline: str
    group: str
    clusters: dict[str, dict[str, str]]
    spark: dict[str, str]
    bucket_size: int
    topics: list[TopicReport] = field(default_factory=list)
    route: str = ""  # the route verified (docs/routes.md); "default": a config without routes
    forward: str = ""  # its forwarding policy, which decides which source records are expected

    @property
    def status(self) -> str:
        return worst(t.status for t in self.topics)

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON document, checked against its models (``reports.document``)."""
        from ureplicator.reports.document import validated  # built on this module's constants

        topics = [t.to_dict() for t in self.topics]
        return validated({
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": round(self.duration_s, 3),
            "status": self.status,
            "mode": run_mode(t["mode"] for t in topics),
            "pipeline": self.pipeline,
            **({"route": self.route, "forward": self.forward} if self.route else {}),
            "group": self.group,
            "clusters": self.clusters,
            "spark": self.spark,
            "hash": HASH_SPEC,
            "bucket_size": self.bucket_size,
            "totals": totals(topics),
            "topics": topics,
        })


def run_mode(topic_modes: Iterable[str]) -> str:
    """full when every topic was read in full, incremental when every one continued, else mixed."""
    modes = set(topic_modes)
    if not modes or modes == {"full"}:
        return "full"
    return "incremental" if modes == {"incremental"} else "mixed"


def totals(topics: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Sums over report topics (dicts as in the JSON): partitions per status, records per category."""
    by_status = dict.fromkeys((OK, WARN, FAIL), 0)
    categories = dict.fromkeys(CATEGORIES, 0)
    verified = 0
    count = 0
    errors = 0
    read = {"source": 0, "destination": 0}
    for topic in topics:
        count += 1
        if topic.get("error"):
            errors += 1
        for side in read:
            read[side] += topic.get("records_read", {}).get(side, 0)
        for p in topic.get("partitions", []):
            by_status[p["status"]] += 1
            verified += p["verified_records"]
            for c in CATEGORIES:
                categories[c] += p["counts"][c]
    return {
        "topics": count,
        "topics_not_verified": errors,
        "partitions": by_status,
        "verified_records": verified,
        "records_read": read,
        "categories": categories,
    }


def summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """The small document the controller serves: status, totals, per-topic status, failing partitions."""
    failing = [
        {
            "topic": t["topic"],
            "partition": p["partition"],
            "status": p["status"],
            "counts": {c: n for c, n in p["counts"].items() if n},
        }
        for t in report["topics"]
        for p in t["partitions"]
        if p["status"] != OK
    ]
    failing.sort(key=lambda f: (-STATUS_ORDER.index(f["status"]), f["topic"], f["partition"]))
    return {
        "schema_version": report["schema_version"],
        "run_id": report["run_id"],
        "status": report["status"],
        "mode": report.get("mode", "full"),
        "started_at": report["started_at"],
        "finished_at": report["finished_at"],
        "duration_s": report["duration_s"],
        "pipeline": report["pipeline"],
        "totals": report["totals"],
        "topics": [
            {"topic": t["topic"], "destination": t["destination"], "status": t["status"], "error": t["error"]}
            for t in report["topics"]
        ],
        "failing_partitions": failing[:100],
    }
