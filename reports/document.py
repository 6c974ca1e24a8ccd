"""The verification report's JSON document as pydantic models: the one source of its shape and its JSON Schema.

:meth:`reports.model.Report.to_dict` passes every report through :func:`validated`, so a
report that strays from these models fails where it is made; ``reports/report.schema.json``
is generated from them (:func:`render`; ``make lint`` checks the checked-in copy, and
``python -m devtools.schemas`` rewrites it).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from ureplicator.common.schemagen import Untitled, untitled
from ureplicator.reports.model import CATEGORIES, MAX_RANGES, MAX_SAMPLES, SCHEMA_VERSION

Count = Annotated[int, Field(ge=0)]
Offset = Annotated[int, Field(ge=0)]
NonEmpty = Annotated[str, Field(min_length=1)]
Seconds = Annotated[float, Field(ge=0)]
Timestamp = Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")]
Hash = Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]
Status = Literal["OK", "WARN", "FAIL", "ERROR"]
Range = Annotated[list[Offset], Field(min_length=2, max_length=2, description="[first, last], both inclusive")]
HalfOpen = Annotated[list[Offset], Field(min_length=2, max_length=2,
                                         description="[log start, watermark): start inclusive, end exclusive")]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Cluster(_Doc):
    alias: str
    bootstrap_servers: str


class Clusters(_Doc):
    source: Cluster
    destination: Cluster


class Spark(_Doc):
    master: str
    version: str
    reader: Literal["digest", "kafka"] = Field(None, description="what pass 1 read with: digest (the verifier's "
                                               "digest reader) or kafka (Spark's Kafka source)")


class HashSpec(_Doc):
    """How content hashes are computed (reports.model.HASH_SPEC), so a reader can recompute one."""

    version: Literal[2]
    algorithm: Literal["xxhash64"]
    seed: Literal[42]
    input: str
    byte_order: Literal["little-endian"]
    bucket_hash: str = None  # type: ignore[assignment]
    bucket_aggregates: list[str] = None  # type: ignore[assignment]
    hash_format: str = None  # type: ignore[assignment]


# One count per category, and one result per category: every category is always present.
Counts = create_model("Counts", __base__=_Doc, **{c: (Count, ...) for c in CATEGORIES})  # type: ignore[call-overload]


class ReadCounts(_Doc):
    source: Count
    destination: Count


class PartitionsByStatus(_Doc):
    OK: Count
    WARN: Count
    FAIL: Count


class Totals(_Doc):
    topics: Count
    topics_not_verified: Count
    partitions: PartitionsByStatus
    verified_records: Count
    records_read: ReadCounts
    categories: Counts  # type: ignore[valid-type]


class Sample(_Doc):
    """One example record of a category; a field is null when that side has no such record."""

    source_partition: int | None
    source_offset: int | None
    destination_offset: Offset | None
    source_hash: Hash | None
    destination_hash: Hash | None
    note: str | None


class Category(_Doc):
    count: Count
    ranges_of: Literal["source", "destination"]
    ranges: list[Range] = Field(max_length=MAX_RANGES)
    ranges_truncated: bool
    samples: list[Sample] = Field(max_length=MAX_SAMPLES)


Categories = create_model("Categories", __base__=_Doc,  # type: ignore[call-overload]
                          **{c: (Category, ...) for c in CATEGORIES})


class Offsets(_Doc):
    log_start: Offset
    end: Offset


class Buckets(_Doc):
    total: Count
    mismatched: Count


class Partition(_Doc):
    partition: Offset
    status: Literal["OK", "WARN", "FAIL"]
    source: Offsets
    destination: Offsets | None
    committed: Offset | None
    watermark: Offset
    mode: Literal["full", "incremental"]
    verified_range: HalfOpen
    destination_range: HalfOpen | None
    verified_records: Count
    buckets: Buckets
    counts: Counts  # type: ignore[valid-type]
    categories: Categories  # type: ignore[valid-type]
    notes: list[str]


class Topic(_Doc):
    topic: NonEmpty
    destination: NonEmpty
    status: Status
    error: str | None
    duration_s: Seconds
    mode: Literal["full", "incremental"]
    mode_reason: str | None
    records_read: ReadCounts
    partitions: list[Partition]


class Report(_Doc):
    """One run of the verifier. Version 2; see docs/verification.md."""

    schema_version: Literal[2]
    run_id: Annotated[str, Field(pattern=r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$")]
    started_at: Timestamp
    finished_at: Timestamp
    duration_s: Seconds
    status: Status
    mode: Literal["full", "incremental", "mixed"]
    pipeline: NonEmpty
    route: NonEmpty = None  # type: ignore[assignment]  # absent for a report made before routes
    forward: Literal["origin", "transit"] = None  # type: ignore[assignment]
    group: NonEmpty
    clusters: Clusters
    spark: Spark
    hash: HashSpec
    bucket_size: Annotated[int, Field(ge=1)]
    totals: Totals
    topics: list[Topic]


assert SCHEMA_VERSION == 2, "a new report version: change schema_version and HashSpec above"  # noqa: S101


def validated(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` checked against :class:`Report` (pydantic's ValidationError names what strays), unchanged."""
    Report.model_validate(document)
    return document


def json_schema() -> dict[str, Any]:
    """The report's JSON Schema (2020-12), generated from :class:`Report`."""
    schema = untitled(TypeAdapter(Report).json_schema(schema_generator=Untitled))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/ureplicator-py/reports/report.schema.json",
        "title": "ureplicator verification report",
        **schema,
    }


def render() -> str:
    """The schema as checked in (``reports/report.schema.json``): stable key order, a trailing newline."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
