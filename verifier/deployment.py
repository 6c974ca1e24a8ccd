"""The deployment-level check: each origin record exactly once on every cluster its routes bring it to, nowhere else.

A per-route run proves one route's copies against its source. This check looks at
the whole deployment at once, per **topic family** (the topics on every cluster
joined by the routes' topic naming: ``t`` on c1, c2 and c3 in an identity-named
mesh; ``t`` on c1 and ``c1.t`` on c3 under prefix naming):

1. **Snapshot**: every route's committed offsets first, then every family
   topic's log start and end on every cluster (so every record below a
   committed offset has its copy below the end read after it).
2. **Identity**: every record read gets the key of the origin record it stands
   for, (origin cluster, origin topic, partition, offset). A record with no
   readable ``urep`` header is an original (its own key); a copy whose hop
   source is its origin names the origin record directly; a relayed copy takes
   the key of the record it was copied from (one join per hop).
3. **Expectation**: per route, from the records on its source and the worker's
   forwarding rule (worker/forwarding.py), how many copies each cluster must
   hold (records below the route's committed offset) or may hold (above it,
   in flight). An original is expected once on its own cluster.
4. **Verdict** per (cluster, topic, key): ``missing`` (fewer copies than
   required), ``duplicate`` (more than expected), ``unexpected`` (a copy no
   route should have written there), ``unresolved`` (a relayed copy whose
   source record is not there). Counts per family and cluster and a few
   samples; never a record list on the driver. Any problem: exit status 1.

Copies of source records below the source's log start (retention) and of
records written after the snapshot are left out and counted (``expired``,
``after_snapshot``).

**Checkpoint** (``OUTPUT/deployment-checkpoint.json``, docs/verification.md): a
family whose snapshot (its edges, every edge's committed offsets, every family
topic's log start and end) equals the last run's is not read again. A changed
family whose last verdict was exact is read from its **marks**: per route and
partition, ``P`` (the committed offset then: every record below it proven
copied once) and ``R`` (the destination offset of the route's first copy at or
above ``P``). A route's copy at or after ``R`` of a source record below ``P`` is
a duplicate; from ``P`` on everything is judged as in a full run. Anything else
(new routes, an offset reset, two paths) is read in full.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ureplicator.common import config as config_module
from ureplicator.common import logs
from ureplicator.common.config import Config
from ureplicator.common.errors import UReplicatorError

PROBLEMS = ("missing", "duplicate", "unexpected", "unresolved")
SAMPLES = 10
REPORT = "deployment.json"
CHECKPOINT = "deployment-checkpoint.json"
CHECKPOINT_VERSION = 1


@dataclass(frozen=True, order=True)
class Edge:
    """One route's mirroring of one topic: (source, source topic) -> (destination, destination topic)."""

    source: str
    source_topic: str
    destination: str
    destination_topic: str
    route: str
    forward: str
    group: str

    def copies(self, origin: str) -> bool:
        """The worker's rule (worker/forwarding.py) for a record on the source whose origin is ``origin``."""
        if self.forward == "origin":
            return origin == self.source
        return origin != self.destination


@dataclass
class Family:
    """Topics joined by routes: its (cluster, topic) nodes and the edges between them."""

    nodes: list[tuple[str, str]]
    edges: list[Edge]

    @property
    def name(self) -> str:
        return ", ".join(f"{c}/{t}" for c, t in self.nodes)


def families(edges: Iterable[Edge]) -> list[Family]:
    """Group the edges into connected families of (cluster, topic) nodes, in a stable order."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(node: tuple[str, str]) -> tuple[str, str]:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    edges = sorted(set(edges))
    for e in edges:
        a, b = find((e.source, e.source_topic)), find((e.destination, e.destination_topic))
        if a != b:
            parent[max(a, b)] = min(a, b)
    grouped: dict[tuple[str, str], Family] = {}
    for e in edges:
        family = grouped.setdefault(find((e.source, e.source_topic)), Family([], []))
        family.edges.append(e)
        for node in ((e.source, e.source_topic), (e.destination, e.destination_topic)):
            if node not in family.nodes:
                family.nodes.append(node)
    for family in grouped.values():
        family.nodes.sort()
    return [grouped[k] for k in sorted(grouped)]


@dataclass
class Verdict:
    """Counts per family and cluster, and samples of each problem."""

    families: list[dict[str, Any]] = field(default_factory=list)

    @property
    def problems(self) -> int:
        return sum(c[p] for f in self.families for c in f["clusters"].values() for p in PROBLEMS)

    @property
    def status(self) -> str:
        return "FAIL" if self.problems else "OK"


# --- the Spark job -------------------------------------------------------------------------------

# urep fields (common.provenance's layout: version, offset, partition, origin length and alias, hop length and alias).
_N = "CAST(conv(hex(substr(_urep, 14, 1)), 16, 10) AS INT)"
_ORIGIN = f"decode(substr(_urep, 15, {_N}), 'UTF-8')"
_HOP = (f"CASE WHEN substr(_urep, 1, 1) = X'02' THEN decode(substr(_urep, 16 + {_N}, "
        f"CAST(conv(hex(substr(_urep, 15 + {_N}, 1)), 16, 10) AS INT)), 'UTF-8') ELSE {_ORIGIN} END")
_PARTITION = ("CASE WHEN CAST(conv(hex(substr(_urep, 10, 4)), 16, 10) AS BIGINT) >= 2147483648 "
              "THEN CAST(conv(hex(substr(_urep, 10, 4)), 16, 10) AS BIGINT) - 4294967296 "
              "ELSE CAST(conv(hex(substr(_urep, 10, 4)), 16, 10) AS BIGINT) END")


def _records(spark: Any, side: Any, cluster: str, topic: str, ranges: Mapping[int, tuple[int, int]]) -> Any:
    """(c, t, p, o, oc, hc, sp, so): every record of one family topic, its origin and hop (null: an original)."""
    from pyspark.sql import functions as F

    from ureplicator.verifier import kafka_source, sql

    frame = kafka_source.with_header_columns(kafka_source.read(spark, side, topic, ranges), sql.LAST_UREP)
    valid = f"({sql.UREP_VALID})"
    return frame.select(
        F.lit(cluster).alias("c"), F.lit(topic).alias("t"), F.col("partition").cast("bigint").alias("p"),
        F.col("offset").alias("o"),
        F.expr(f"CASE WHEN {valid} THEN {_ORIGIN} END").alias("oc"),
        F.expr(f"CASE WHEN {valid} THEN {_HOP} END").alias("hc"),
        F.expr(f"CASE WHEN {valid} THEN {_PARTITION} END").alias("sp"),
        F.expr(f"CASE WHEN {valid} THEN {sql.UREP_OFFSET} END").alias("so"),
    )


Marks = dict[tuple[str, int], tuple[int, int]]  # (route, partition) -> (proven source offset P, resume at R)


def windows(
    family: Family, bounds: Mapping[tuple[str, str], Mapping[int, tuple[int, int]]], marks: Marks
) -> dict[tuple[str, str], dict[int, tuple[int, int]]]:
    """What to read of each family topic after a checkpoint: per partition from the smallest mark that concerns it.

    A destination partition from the smallest ``R`` of the routes writing it, a source partition from the
    smallest ``P`` of the routes reading it (a topic that is both: the smaller), never below its log start.
    """
    starts: dict[tuple[str, str, int], int] = {}
    for e in family.edges:
        for (c, t), side in (((e.destination, e.destination_topic), 1), ((e.source, e.source_topic), 0)):
            for p in bounds.get((c, t), {}):
                mark = marks.get((e.route, p))
                at = mark[side] if mark is not None else 0
                starts[(c, t, p)] = min(starts.get((c, t, p), at), at)
    return {(c, t): {p: (max(start, starts.get((c, t, p), start)), end) for p, (start, end) in parts.items()}
            for (c, t), parts in bounds.items() if (c, t) in family.nodes}


def single_paths(family: Family) -> bool:
    """Whether every origin cluster's records reach every topic of the family by one path at most.

    The topology check refuses routes under which they would not; a family read from its
    checkpoint relies on it (a second path's copy would otherwise go unseen next to the first).
    """
    for origin_node in family.nodes:
        origin = origin_node[0]
        found: dict[tuple[str, str], int] = {}
        stack = [(origin_node, frozenset({origin_node}))]
        while stack:
            node, seen = stack.pop()
            for e in family.edges:
                if (e.source, e.source_topic) == node and e.copies(origin):
                    nxt = (e.destination, e.destination_topic)
                    found[nxt] = found.get(nxt, 0) + 1
                    if nxt not in seen:
                        stack.append((nxt, seen | {nxt}))
        if any(n > 1 for n in found.values()) or origin_node in found:
            return False
    return True


def check_family(
    spark: Any,
    family: Family,
    sides: Mapping[str, Any],
    bounds: Mapping[tuple[str, str], Mapping[int, tuple[int, int]]],
    committed: Mapping[Edge, Mapping[int, int | None]],
    marks: Marks | None = None,
) -> dict[str, Any]:
    """Counts per cluster of ``family`` (records, originals, copies, missing, duplicate, unexpected, expired,
    after_snapshot, unresolved) and samples of each problem; ``read``: the records read.

    ``marks`` (from the checkpoint of an exact run, same routes): read only from them on (:func:`windows`).
    The result's ``_marks`` are this run's, for the next checkpoint (None when the family is not exact).
    """

    ranges = windows(family, bounds, marks) if marks else bounds
    frames = [_records(spark, sides[c], c, t, ranges[(c, t)]) for c, t in family.nodes if ranges.get((c, t))]
    clusters: dict[str, dict[str, int]] = {
        c: {k: 0 for k in ("records", "originals", "copies", *PROBLEMS, "expired", "after_snapshot")}
        for c, _ in family.nodes
    }
    result: dict[str, Any] = {"family": family.name, "nodes": [f"{c}/{t}" for c, t in family.nodes],
                              "routes": sorted({e.route for e in family.edges}), "clusters": clusters, "samples": [],
                              "read": 0, "from_checkpoint": bool(marks)}
    if not frames:
        return result
    records = frames[0]
    for frame in frames[1:]:
        records = records.unionByName(frame)
    # Checkpointed (in the executors' block managers): later steps join these tables several times, and
    # re-deriving them each time would make Spark analyse a plan that doubles with every hop resolved.
    records = records.localCheckpoint()
    result["read"] = records.count()
    _judge(spark, family, records, bounds, committed, result, marks or {})
    return result


def _judge(
    spark: Any,
    family: Family,
    records: Any,
    bounds: Mapping[tuple[str, str], Mapping[int, tuple[int, int]]],
    committed: Mapping[Edge, Mapping[int, int | None]],
    result: dict[str, Any],
    marks: Marks,
) -> None:
    from pyspark.sql import functions as F

    key = ["kc", "kt", "kp", "ko"]
    mark_rows = [(r, int(p), int(pv), int(rv)) for (r, p), (pv, rv) in marks.items()] or [("", -1, 0, 0)]
    marked = spark.createDataFrame(mark_rows, "kr string, kpart bigint, kproven bigint, kresume bigint")
    edges = spark.createDataFrame(
        [(e.source, e.source_topic, e.destination, e.destination_topic, e.route, e.forward) for e in family.edges],
        "es string, ets string, ed string, etd string, route string, forward string",
    )
    bound_rows = [(c, t, int(p), int(s), int(e)) for (c, t), parts in bounds.items() for p, (s, e) in parts.items()]
    limits = spark.createDataFrame(bound_rows, "bc string, bt string, bp bigint, start bigint, stop bigint")
    originals = records.filter(F.col("oc").isNull()).select(
        "c", "t", "p", "o", F.col("c").alias("origin"), F.col("c").alias("kc"), F.col("t").alias("kt"),
        F.col("p").alias("kp"), F.col("o").alias("ko"),
    )
    copies = (
        records.filter(F.col("oc").isNotNull())
        .join(F.broadcast(edges), (F.col("hc") == F.col("es")) & (F.col("c") == F.col("ed"))
              & (F.col("t") == F.col("etd")), "left")
        .join(F.broadcast(limits), (F.col("hc") == F.col("bc")) & (F.col("ets") == F.col("bt"))
              & (F.col("sp") == F.col("bp")), "left")
        .join(F.broadcast(marked), (F.col("route") == F.col("kr")) & (F.col("p") == F.col("kpart")), "left")
        # After a checkpoint: a route's copy below its R was proven by an earlier run (not judged again);
        # at or after R, a copy of a source record below P (proven copied once) is a second copy.
        .withColumn("state", F.expr(
            "CASE WHEN es IS NULL THEN 'unexpected' WHEN kresume IS NOT NULL AND o < kresume THEN 'proven' "
            "WHEN kproven IS NOT NULL AND so < kproven THEN 'replayed' WHEN start IS NULL THEN 'unresolved' "
            "WHEN so < start THEN 'expired' WHEN so >= stop THEN 'after_snapshot' ELSE 'ok' END"))
        .localCheckpoint()
    )
    for r in copies.groupBy("c", "state").count().collect():
        counts = result["clusters"][r.c]
        if r.state == "proven":
            continue
        counts["copies"] += r["count"]
        if r.state == "replayed":
            counts["duplicate"] += r["count"]
        elif r.state != "ok":
            counts[r.state] += r["count"]
    for r in copies.filter(F.col("state") == "replayed").orderBy("c", "p", "o").limit(SAMPLES).collect():
        result["samples"].append({
            "cluster": r.c, "topic": r.t, "problem": "duplicate", "origin": r.oc, "partition": r.sp,
            "offset": r.so, "route": r.route,
            "note": f"a second copy of {r.hc}/{r.ets}[{r.sp}]@{r.so}, which an earlier run proved copied once",
        })
    unexpected_rows = copies.filter(F.col("state") == "unexpected")
    usable = copies.filter(F.col("state") == "ok")
    direct = usable.filter(F.col("hc") == F.col("oc")).select(
        "c", "t", "p", "o", F.col("oc").alias("origin"), F.col("oc").alias("kc"), F.col("ets").alias("kt"),
        F.col("sp").alias("kp"), F.col("so").alias("ko"),
    )
    resolved = originals.unionByName(direct).localCheckpoint()
    pending = usable.filter(F.col("hc") != F.col("oc")).select(
        "c", "t", "p", "o", F.col("oc").alias("origin"), F.col("hc").alias("lc"), F.col("ets").alias("lt"),
        F.col("sp").alias("lp"), F.col("so").alias("lo"),
    )
    for _ in range(len({c for c, _ in family.nodes})):  # one join per further hop (a loop resolves too)
        if pending.isEmpty():
            break
        lookup = resolved.select(F.col("c").alias("lc"), F.col("t").alias("lt"), F.col("p").alias("lp"),
                                 F.col("o").alias("lo"), *key)
        found = pending.join(lookup, ["lc", "lt", "lp", "lo"], "left")
        resolved = resolved.unionByName(found.filter(F.col("kc").isNotNull()).select(
            "c", "t", "p", "o", "origin", *key)).localCheckpoint()
        pending = found.filter(F.col("kc").isNull()).drop(*key).localCheckpoint()
    for r in pending.groupBy("c").count().collect():  # relayed copies whose source record was not read
        result["clusters"][r.c]["unresolved"] += r["count"]
    for r in originals.groupBy("c").count().collect():
        result["clusters"][r.c]["originals"] += r["count"]
    actual = resolved.groupBy("c", "t", *key).agg(F.count(F.lit(1)).alias("n"))
    expected = _expected(spark, family, resolved, committed, marked)
    joined = actual.join(expected, ["c", "t", *key], "full_outer").fillna(0, ["n", "low", "high"])
    verdict = joined.withColumn("problem", F.expr(
        "CASE WHEN n < low THEN 'missing' WHEN high = 0 AND n > 0 THEN 'unexpected' "
        "WHEN n > high THEN 'duplicate' END")).filter(F.col("problem").isNotNull())
    verdict = verdict.withColumn("extra", F.expr(
        "CASE problem WHEN 'missing' THEN low - n WHEN 'duplicate' THEN n - high ELSE n END")).localCheckpoint()
    for r in verdict.groupBy("c", "problem").agg(F.sum("extra").alias("n")).collect():
        result["clusters"][r.c][r.problem] += int(r.n)
    for r in verdict.orderBy("c", "problem", *key).limit(SAMPLES).collect():
        result["samples"].append({
            "cluster": r.c, "topic": r.t, "problem": r.problem, "origin": r.kc, "origin_topic": r.kt,
            "partition": r.kp, "offset": r.ko, "copies": int(r.n), "expected_at_least": int(r.low),
            "expected_at_most": int(r.high),
        })
    for r in unexpected_rows.orderBy("c", "p", "o").limit(SAMPLES).collect():
        result["samples"].append({
            "cluster": r.c, "topic": r.t, "problem": "unexpected", "origin": r.oc, "partition": r.p,
            "offset": r.o, "note": f"no route from {r.hc} writes {r.c}/{r.t}",
        })
    for counts in result["clusters"].values():
        counts["records"] = counts["originals"] + counts["copies"]
    result["_marks"] = _next_marks(family, copies, committed, bounds) if not _problems(result) else None


def _problems(result: Mapping[str, Any]) -> int:
    return sum(c[p] for c in result["clusters"].values() for p in PROBLEMS)


def _next_marks(family: Family, copies: Any, committed: Mapping[Edge, Mapping[int, int | None]],
                bounds: Mapping[tuple[str, str], Mapping[int, tuple[int, int]]]) -> Marks | None:
    """For an exact family: per (route, partition), P = the committed offset (every record below it proven
    copied once) and R = the destination offset of the route's first copy at or above P (else the end)."""
    from pyspark.sql import functions as F

    if len({e.route for e in family.edges}) != len(family.edges) or not single_paths(family):
        return None  # a route with two topics here, or two paths: next time read it all
    proven = {(e.route, p): (o or 0) for e in family.edges for p, o in committed.get(e, {}).items()}
    if not proven:
        return None
    spark = copies.sparkSession
    wanted = spark.createDataFrame([(r, int(p), int(o)) for (r, p), o in proven.items()],
                                   "wr string, wp bigint, wo bigint")
    first = {(r.route, int(r.p)): int(r.at) for r in copies
             .join(F.broadcast(wanted), (F.col("route") == F.col("wr")) & (F.col("p") == F.col("wp"))
                   & (F.col("so") >= F.col("wo")))
             .groupBy("route", "p").agg(F.min("o").alias("at")).collect()}
    ends = {e.route: bounds.get((e.destination, e.destination_topic), {}) for e in family.edges}
    return {(r, p): (o, first.get((r, p), ends[r].get(p, (0, 0))[1])) for (r, p), o in proven.items()}


def _expected(spark: Any, family: Family, resolved: Any, committed: Mapping[Edge, Mapping[int, int | None]],
              marked: Any) -> Any:
    """(c, t, key, low, high): copies each cluster must hold (low) and may hold (high), per origin record.

    After a checkpoint a route expects nothing more of the source records below its P (proven copied)."""
    from pyspark.sql import functions as F

    key = ["kc", "kt", "kp", "ko"]
    rows = [(e.route, int(p), -1 if o is None else int(o))
            for e in family.edges for p, o in committed.get(e, {}).items()]
    marks = spark.createDataFrame(rows or [("", 0, -1)], "mr string, mp bigint, mo bigint")
    own = resolved.select("c", "t", *key, F.lit(1).alias("low"), F.lit(1).alias("high")).filter(
        (F.col("c") == F.col("kc")) & (F.col("t") == F.col("kt")) & (F.col("p") == F.col("kp"))
        & (F.col("o") == F.col("ko")))
    parts = [own]
    for e in family.edges:
        rule = "origin = c" if e.forward == "origin" else f"origin <> '{e.destination}'"
        carried = (
            resolved.filter((F.col("c") == e.source) & (F.col("t") == e.source_topic) & F.expr(rule))
            .join(F.broadcast(marked.filter(F.col("kr") == e.route).select("kpart", "kproven")),
                  F.col("p") == F.col("kpart"), "left")
            .filter(F.col("kproven").isNull() | (F.col("o") >= F.col("kproven")))
            .drop("kpart", "kproven")
            .join(F.broadcast(marks.filter(F.col("mr") == e.route)), F.col("p") == F.col("mp"), "left")
            .select(F.lit(e.destination).alias("c"), F.lit(e.destination_topic).alias("t"), *key,
                    F.expr("CASE WHEN o < coalesce(mo, -1) THEN 1 ELSE 0 END").alias("low"), F.lit(1).alias("high"))
        )
        parts.append(carried)
    expected = parts[0]
    for part in parts[1:]:
        expected = expected.unionByName(part)
    return expected.groupBy("c", "t", *key).agg(F.sum("low").alias("low"), F.sum("high").alias("high"))


# --- the checkpoint: unchanged families are not read again ----------------------------------


def family_snapshot(
    family: Family,
    committed: Mapping[Edge, Mapping[int, int | None]],
    bounds: Mapping[tuple[str, str], Mapping[int, tuple[int, int]]],
) -> dict[str, Any]:
    """What a family's verdict depends on, as JSON: its edges, their committed offsets, its topics' offsets.

    Kafka logs only grow at their end and lose records at their start (retention), so two runs
    that see the same snapshot read the same records and reach the same verdict. A compacted
    topic may lose records in between without moving either offset; compaction removes, never
    adds, so the earlier verdict still saw every copy that existed.
    """
    return {
        "edges": [[e.source, e.source_topic, e.destination, e.destination_topic, e.route, e.forward, e.group]
                  for e in sorted(family.edges)],
        "committed": [[e.route, e.source_topic, sorted([p, o] for p, o in committed.get(e, {}).items())]
                      for e in sorted(family.edges)],
        "bounds": [[c, t, sorted([p, s, e] for p, (s, e) in bounds.get((c, t), {}).items())]
                   for c, t in family.nodes],
    }


def load_checkpoint(output: Path) -> dict[str, Any]:
    """The last run's families (name -> {"snapshot", "result", "read_at"}); empty when none or unreadable."""
    try:
        doc = json.loads((output / CHECKPOINT).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("version") != CHECKPOINT_VERSION:
        return {}  # another layout: read everything once more
    families = doc.get("families")
    return families if isinstance(families, dict) else {}


def usable_marks(last: Any, snap: Mapping[str, Any], family: Family,
                 committed: Mapping[Edge, Mapping[int, int | None]]) -> Marks | None:
    """The last run's marks when this run may read from them: that run was exact and left marks, the
    family's routes are the same, and no committed offset went back below its P (an offset reset)."""
    if not isinstance(last, dict) or not last.get("marks") or last.get("snapshot", {}).get("edges") != snap["edges"]:
        return None
    try:
        marks = {(str(r), int(p)): (int(pv), int(rv)) for r, p, pv, rv in last["marks"]}
    except (TypeError, ValueError):
        return None
    now = {(e.route, p): (o or 0) for e in family.edges for p, o in committed.get(e, {}).items()}
    if any(now.get(key, 0) < proven for key, (proven, _) in marks.items()) or not single_paths(family):
        return None
    return marks


def save_checkpoint(output: Path, families: Mapping[str, Any]) -> None:
    path = output / CHECKPOINT
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps({"version": CHECKPOINT_VERSION, "families": families}, indent=1) + "\n")
    partial.replace(path)  # atomic: a run that dies mid-write leaves the previous checkpoint


# --- the command -----------------------------------------------------------------------------


def deployment_edges(config: Config, timeout_s: float) -> tuple[list[Edge], list[Config]]:
    """Every route's mirrored topics as edges (routes from the config file and the REST registry)."""
    from ureplicator.common import zk
    from ureplicator.common.zkschema import Paths

    views = [config_module.route_view(config, r.id) for r in config.routes]
    client = zk.connect(config, timeout_s, read_only=True)
    try:
        known = {r.id for r in config.routes}
        for route_id in sorted(set(zk.read_routes(client, Paths(config.pipeline_root))) - known):
            views.append(zk.route_config(config, route_id, timeout_s))
        edges = []
        for view in views:
            try:
                topics = zk.read_topics(client, Paths(view.root))
            except Exception:  # noqa: BLE001 - a route with no state yet mirrors nothing
                topics = {}
            route = view.route_id or config_module.IMPLICIT_ROUTE
            for name, record in topics.items():
                edges.append(Edge(view.source.alias, name, view.destination.alias, record.destination, route,
                                  view.forward, view.consumer_group))
    finally:
        client.stop()
        client.close()
    return edges, views


def snapshot(
    config: Config, views: Sequence[Config], edges: Sequence[Edge], timeout_s: float
) -> tuple[dict[Edge, dict[int, int | None]], dict[tuple[str, str], dict[int, tuple[int, int]]]]:
    """Committed offsets of every edge first, then (log start, end) of every family topic."""
    from ureplicator.verifier.watermarks import Clusters

    cluster_configs = {v.source.alias: v.source for v in views} | {v.destination.alias: v.destination for v in views}
    admins = {alias: Clusters(c, c, timeout_s) for alias, c in cluster_configs.items()}
    for admin in admins.values():
        admin.check_reachable()
    committed: dict[Edge, dict[int, int | None]] = {}
    for e in edges:
        count = admins[e.source].partitions("source", e.source_topic)
        committed[e] = admins[e.source].committed(e.group, e.source_topic, count) if count else {}
    bounds: dict[tuple[str, str], dict[int, tuple[int, int]]] = {}
    for c, t in sorted({(e.source, e.source_topic) for e in edges} | {(e.destination, e.destination_topic)
                                                                       for e in edges}):
        count = admins[c].partitions("source", t)
        bounds[(c, t)] = admins[c].offsets("source", t, count) if count else {}
    return committed, bounds


def run(args: argparse.Namespace, spark: Callable[[], Any]) -> int:
    """``ureplicator verify --deployment``: 0 every family exact, 1 a problem, 2 could not run."""
    from confluent_kafka import KafkaException

    from ureplicator.verifier import kafka_options
    from ureplicator.verifier.run import iso, kafka_side, stderr_progress

    started = datetime.now(timezone.utc)
    clock = time.monotonic()
    try:
        config = config_module.load(args.config)
        logs.register_secrets(config_module.secret_values(config))
        edges, views = deployment_edges(config, args.timeout)
        if args.topic:
            wanted = {t.partition("=")[0] for t in args.topic}
            edges = [e for f in families(edges) if any(t in wanted for _, t in f.nodes) for e in f.edges]
        committed, bounds = snapshot(config, views, edges, args.timeout)
        extra: dict[str, dict[str, str]] = {"source": {}, "destination": {}}
        for item in args.kafka_option:
            side, key, value = kafka_options.parse_option(item)
            extra[side][key] = value
        sides = {}
        for view in views:
            for name, cluster in (("source", view.source), ("destination", view.destination)):
                if cluster.alias not in sides:
                    sides[cluster.alias] = kafka_side(name, cluster, extra[name], lambda _m: None)
        verdict = Verdict()
        output = Path(args.output)
        previous = load_checkpoint(output)
        checkpoint: dict[str, Any] = {}
        session = None
        now = iso(datetime.now(timezone.utc))
        for family in families(edges):
            snap = family_snapshot(family, committed, bounds)
            last = previous.get(family.name)
            if isinstance(last, dict) and last.get("snapshot") == snap and isinstance(last.get("result"), dict):
                stderr_progress(f"family {family.name}: unchanged since {last.get('read_at')}, not read again")
                result = {**last["result"], "reused_from": last.get("read_at")}
                checkpoint[family.name] = last
            else:
                marks = usable_marks(last, snap, family, committed)
                how = "from its checkpoint" if marks else "in full"
                stderr_progress(f"family {family.name}: routes {', '.join(sorted({e.route for e in family.edges}))}; "
                                f"read {how}")
                session = session or spark()
                result = check_family(session, family, sides, bounds, committed, marks)
                entry = {"snapshot": snap, "result": result, "read_at": now}
                fresh = result.pop("_marks", None)
                if fresh:
                    entry["marks"] = sorted([r, p, pv, rv] for (r, p), (pv, rv) in fresh.items())
                checkpoint[family.name] = entry
            verdict.families.append(result)
    except (UReplicatorError, OSError, KafkaException) as exc:
        reason = str(exc.args[0]) if isinstance(exc, KafkaException) and exc.args else str(exc)
        print(f"ureplicator verify --deployment: {reason}", file=sys.stderr, flush=True)
        return 2
    document = {
        "pipeline": config.pipeline, "started_at": iso(started), "finished_at": iso(datetime.now(timezone.utc)),
        "duration_s": round(time.monotonic() - clock, 3), "status": verdict.status, "problems": verdict.problems,
        "families": verdict.families,
    }
    path = Path(args.output) / REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    save_checkpoint(Path(args.output), checkpoint)
    for family in verdict.families:
        for cluster, counts in family["clusters"].items():
            shown = ", ".join(f"{p} {counts[p]}" for p in PROBLEMS if counts[p]) or "exact"
            reused = (f" (unchanged since {family['reused_from']}: not read again)" if family.get("reused_from")
                      else " (new records since the checkpoint)" if family.get("from_checkpoint") else "")
            print(f"{family['family']} @ {cluster}: {counts['originals']:,} originals, {counts['copies']:,} copies; "
                  f"{shown}{reused}", flush=True)
        for sample in family["samples"]:
            print(f"  {sample['problem']}: {json.dumps(sample, sort_keys=True)}", flush=True)
    print(f"{verdict.status}: {len(verdict.families)} topic famil{'y' if len(verdict.families) == 1 else 'ies'}, "
          f"{verdict.problems} problem(s) in {document['duration_s']:.1f}s; report {path}", flush=True)
    return 1 if verdict.problems else 0
