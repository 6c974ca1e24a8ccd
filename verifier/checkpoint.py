"""Where the next verification run continues: per topic-partition watermarks kept between runs.

An incremental run reads only what arrived since the last run: source offsets
from the previous verified watermark, destination offsets from the first one
that can hold a copy of them. This module is the pure core of that —
:func:`plan` turns a checkpoint and a fresh offset snapshot into per-partition
resume points (or a full pass, with the reason), :func:`advance` turns a run's
outcome into the next checkpoint — plus :class:`CheckpointFile`, which keeps
it on disk atomically with a checksum so a damaged file is detected, never
trusted (the file's shape is one pydantic model, ``_Body``, read and written
through it).

Rules (docs/verification.md, "Incremental runs"):

* a partition's checkpoint advances only when it verified clean (OK or WARN);
  a FAIL keeps the old one, so the next run looks at the same records again
  and the failure stays visible until it is repaired;
* a recreated topic (another topic id), a changed destination, a truncated
  log (end below the checkpoint), another hash version or pipeline, a damaged
  or missing file, ``--full`` and the ``--full-every`` schedule mean a full pass.

Example::

    stored = CheckpointFile(path).load()             # (Checkpoint | None, note | None)
    decision = plan(stored.topics.get("orders"), identity, partitions, now, full_every_s=86400)
    ...                                              # verify with decision.resume
    stored.topics["orders"] = advance(...)           # then CheckpointFile(path).save(stored)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ureplicator.reports import model
from ureplicator.reports.model import Watermarks

FORMAT_VERSION = 1
FILE_NAME = "checkpoint.json"


@dataclass(frozen=True)
class PartitionCheckpoint:
    """Where one partition's next run starts."""

    watermark: int  # source offsets below were verified clean
    destination_offset: int  # copies of source offsets >= watermark sit at or above this destination offset
    source_log_start: int
    destination_log_start: int


@dataclass(frozen=True)
class TopicCheckpoint:
    destination: str
    source_topic_id: str | None
    destination_topic_id: str | None
    last_full_at: str  # ISO time of the last full pass over the topic
    partitions: dict[int, PartitionCheckpoint] = field(default_factory=dict)


@dataclass
class Checkpoint:
    """The whole file: which pipeline and clusters it belongs to, and one entry per source topic."""

    pipeline: str
    group: str
    source_alias: str
    destination_alias: str
    hash_version: int = model.HASH_SPEC["version"]
    topics: dict[str, TopicCheckpoint] = field(default_factory=dict)

    def matches(self, pipeline: str, group: str, source_alias: str, destination_alias: str) -> str | None:
        """None when this checkpoint belongs to the run described, else why not."""
        mine = (self.pipeline, self.group, self.source_alias, self.destination_alias)
        theirs = (pipeline, group, source_alias, destination_alias)
        if mine != theirs:
            return (f"it belongs to pipeline {self.pipeline} (group {self.group}, {self.source_alias} -> "
                    f"{self.destination_alias})")
        if self.hash_version != model.HASH_SPEC["version"]:
            return f"it was written with record hash version {self.hash_version}"
        return None


@dataclass(frozen=True)
class TopicIdentity:
    """What identifies a topic beyond its name: Kafka's topic ids (None when the cluster does not say)."""

    destination: str
    source_topic_id: str | None
    destination_topic_id: str | None


@dataclass(frozen=True)
class Decision:
    """How one topic is verified this run."""

    full: bool
    reason: str | None  # why a full pass (None for incremental)
    resume: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (source, destination offset)
    notes: dict[int, list[str]] = field(default_factory=dict)  # per partition, said in the report

    @property
    def mode(self) -> str:
        return "full" if not self.resume else "incremental"


def _parse_time(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def plan(
    previous: TopicCheckpoint | None,
    identity: TopicIdentity,
    partitions: Mapping[int, Watermarks],
    now: datetime,
    full: bool = False,
    full_every_s: float | None = None,
    unusable: str | None = None,
) -> Decision:
    """Per partition, where this run starts; or a full pass and why.

    ``unusable`` is the reason the checkpoint file as a whole cannot be used (damaged, another pipeline).
    """
    if full:
        return Decision(True, "--full was given")
    if unusable is not None:
        return Decision(True, unusable)
    if previous is None:
        return Decision(True, "no checkpoint for this topic yet")
    if previous.destination != identity.destination:
        return Decision(True, f"the destination changed from {previous.destination} to {identity.destination}")
    for side, before, after in (
        ("source", previous.source_topic_id, identity.source_topic_id),
        ("destination", previous.destination_topic_id, identity.destination_topic_id),
    ):
        if before and after and before != after:
            return Decision(True, f"the {side} topic was deleted and created again (topic id {before} -> {after})")
    if full_every_s is not None:
        last_full = _parse_time(previous.last_full_at)
        if last_full is None or (now - last_full).total_seconds() >= full_every_s:
            return Decision(True, f"scheduled full pass (--full-every; the last was at {previous.last_full_at})")
    resume: dict[int, tuple[int, int]] = {}
    notes: dict[int, list[str]] = {}
    for p, w in sorted(partitions.items()):
        saved = previous.partitions.get(p)
        said = notes.setdefault(p, [])
        if saved is None:
            said.append("no checkpoint for this partition: verified from its log start")
            continue
        if w.end < saved.watermark:
            said.append(f"the source end offset {w.end} is below the checkpoint's watermark {saved.watermark} "
                        "(log truncated): verified from its log start")
            continue
        if w.destination_end is None or w.destination_end < saved.destination_offset:
            said.append(f"the destination end offset {w.destination_end} is below the checkpoint's destination "
                        f"offset {saved.destination_offset} (log truncated): verified from its log start")
            continue
        if w.log_start > saved.watermark:
            said.append(f"source records [{saved.watermark}, {w.log_start}) expired before they could be verified")
        resume[p] = (saved.watermark, saved.destination_offset)
    notes = {p: n for p, n in notes.items() if n}
    if not resume:
        return Decision(True, "no partition can continue from the checkpoint", notes=notes)
    return Decision(False, None, resume, notes)


def advance(
    previous: TopicCheckpoint | None,
    identity: TopicIdentity,
    partitions: Mapping[int, Watermarks],
    statuses: Mapping[int, str],
    first_unverified: Mapping[int, int],
    full: bool,
    now: datetime,
) -> TopicCheckpoint:
    """The topic's next checkpoint after a run that read ``partitions`` (with their resume points).

    A partition that verified clean moves to the end of its verified range; its destination offset is
    the lowest one this run saw naming a source offset at or above that end (else the destination end).
    A partition that FAILed, or whose destination does not exist, keeps its previous entry.
    """
    kept = dict(previous.partitions) if previous is not None and previous.destination == identity.destination else {}
    entries: dict[int, PartitionCheckpoint] = {}
    for p, w in partitions.items():
        if statuses.get(p) not in (model.OK, model.WARN) or w.destination_range is None:
            if p in kept:
                entries[p] = kept[p]
            continue
        _, destination_end = w.destination_range
        entries[p] = PartitionCheckpoint(
            watermark=w.verify_to,
            destination_offset=min(first_unverified.get(p, destination_end), destination_end),
            source_log_start=w.log_start,
            destination_log_start=w.destination_log_start if w.destination_log_start is not None else 0,
        )
    last_full = iso_time(now) if full or previous is None else previous.last_full_at
    return TopicCheckpoint(
        destination=identity.destination,
        source_topic_id=identity.source_topic_id,
        destination_topic_id=identity.destination_topic_id,
        last_full_at=last_full,
        partitions=entries,
    )


def iso_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


# --- the file ----------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


Offset = Annotated[int, Field(ge=0)]


class _TopicBody(_Model):
    """A :class:`TopicCheckpoint` in the file: each partition as [watermark, destination offset, log starts]."""

    destination: str
    source_topic_id: str | None
    destination_topic_id: str | None
    last_full_at: str
    partitions: dict[int, tuple[Offset, Offset, Offset, Offset]]


class _Body(_Model):
    """The checkpoint's body in the file (what the SHA-256 covers): the one description of its shape."""

    pipeline: str
    group: str
    source_alias: str
    destination_alias: str
    hash_version: int
    topics: dict[str, _TopicBody]


def to_dict(checkpoint: Checkpoint) -> dict[str, Any]:
    body = _Body(
        pipeline=checkpoint.pipeline, group=checkpoint.group, source_alias=checkpoint.source_alias,
        destination_alias=checkpoint.destination_alias, hash_version=checkpoint.hash_version,
        topics={
            name: _TopicBody(
                destination=t.destination, source_topic_id=t.source_topic_id,
                destination_topic_id=t.destination_topic_id, last_full_at=t.last_full_at,
                partitions={p: (c.watermark, c.destination_offset, c.source_log_start, c.destination_log_start)
                            for p, c in sorted(t.partitions.items())},
            )
            for name, t in sorted(checkpoint.topics.items())
        },
    )
    return body.model_dump(mode="json")


def from_dict(body: Mapping[str, Any]) -> Checkpoint:
    """Raises ValueError naming the first problem (``topics.t.partitions.1.1: ...``) on anything not a checkpoint."""
    try:
        parsed = _Body.model_validate(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise ValueError(f"{'.'.join(map(str, first['loc'])) or 'body'}: {first['msg']}") from None
    return Checkpoint(
        pipeline=parsed.pipeline, group=parsed.group, source_alias=parsed.source_alias,
        destination_alias=parsed.destination_alias, hash_version=parsed.hash_version,
        topics={
            name: TopicCheckpoint(
                destination=t.destination, source_topic_id=t.source_topic_id,
                destination_topic_id=t.destination_topic_id, last_full_at=t.last_full_at,
                partitions={p: PartitionCheckpoint(*offsets) for p, offsets in t.partitions.items()},
            )
            for name, t in parsed.topics.items()
        },
    )


def _digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class CheckpointBusy(OSError):
    """Another verifier holds this checkpoint: two runs would overwrite each other's progress."""


class CheckpointFile:
    """The checkpoint on disk: JSON with a SHA-256 of its body, replaced atomically (write, fsync, rename)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold ``<file>.lock`` for a whole run; raise CheckpointBusy when another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CheckpointBusy(
                    f"another verifier is running with checkpoint {self.path} (lock {lock} is held)"
                ) from None
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def load(self) -> tuple[Checkpoint | None, str | None]:
        """The checkpoint, or None and why it cannot be used (None, None when there is none yet)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, f"checkpoint {self.path} cannot be read ({exc.strerror}): full pass"
        try:
            document = json.loads(text)
            if document.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {document.get('format_version')!r}")
            if document.get("sha256") != _digest(document["checkpoint"]):
                raise ValueError("checksum mismatch")
            return from_dict(document["checkpoint"]), None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return None, f"checkpoint {self.path} is damaged ({exc}): full pass"

    def save(self, checkpoint: Checkpoint) -> None:
        body = to_dict(checkpoint)
        document = {"format_version": FORMAT_VERSION, "sha256": _digest(body), "checkpoint": body}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(document, out, indent=1, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        try:  # the rename itself survives a crash only once the directory is synced
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
