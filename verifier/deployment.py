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

# urep fields (sparkjob's layout: version, offset, partition, origin length and alias, hop length and alias).
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

    from ureplicator.verifier import sparkjob

    frame = sparkjob._with_header_columns(sparkjob.read(spark, side, topic, ranges), sparkjob._LAST_UREP)
    valid = f"({sparkjob._UREP_VALID})"
    return frame.select(
        F.lit(cluster).alias("c"), F.lit(topic).alias("t"), F.col("partition").cast("bigint").alias("p"),
        F.col("offset").alias("o"),
        F.expr(f"CASE WHEN {valid} THEN {_ORIGIN} END").alias("oc"),
        F.expr(f"CASE WHEN {valid} THEN {_HOP} END").alias("hc"),
        F.expr(f"CASE WHEN {valid} THEN {_PARTITION} END").alias("sp"),
        F.expr(f"CASE WHEN {valid} THEN {sparkjob._UREP_OFFSET} END").alias("so"),
    )


def check_family(
    spark: Any,
    family: Family,
    sides: Mapping[str, Any],
    bounds: Mapping[tuple[str, str], Mapping[int, tuple[int, int]]],
    committed: Mapping[Edge, Mapping[int, int | None]],
) -> dict[str, Any]:
    """Counts per cluster of ``family`` (records, originals, copies, missing, duplicate, unexpected, expired,
    after_snapshot, unresolved) and samples of each problem."""

    frames = [_records(spark, sides[c], c, t, bounds[(c, t)]) for c, t in family.nodes if bounds.get((c, t))]
    clusters: dict[str, dict[str, int]] = {
        c: {k: 0 for k in ("records", "originals", "copies", *PROBLEMS, "expired", "after_snapshot")}
        for c, _ in family.nodes
    }
    result: dict[str, Any] = {"family": family.name, "nodes": [f"{c}/{t}" for c, t in family.nodes],
                              "routes": sorted({e.route for e in family.edges}), "clusters": clusters, "samples": []}
    if not frames:
        return result
    records = frames[0]
    for frame in frames[1:]:
        records = records.unionByName(frame)
    # Checkpointed (in the executors' block managers): later steps join these tables several times, and
    # re-deriving them each time would make Spark analyse a plan that doubles with every hop resolved.
    records = records.localCheckpoint()
    _judge(spark, family, records, bounds, committed, result)
    return result


def _judge(
    spark: Any,
    family: Family,
    records: Any,
    bounds: Mapping[tuple[str, str], Mapping[int, tuple[int, int]]],
    committed: Mapping[Edge, Mapping[int, int | None]],
    result: dict[str, Any],
) -> None:
    from pyspark.sql import functions as F

    key = ["kc", "kt", "kp", "ko"]
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
        .withColumn("state", F.expr(
            "CASE WHEN es IS NULL THEN 'unexpected' WHEN start IS NULL THEN 'unresolved' "
            "WHEN so < start THEN 'expired' WHEN so >= stop THEN 'after_snapshot' ELSE 'ok' END"))
        .localCheckpoint()
    )
    for r in copies.groupBy("c", "state").count().collect():
        counts = result["clusters"][r.c]
        counts["copies"] += r["count"]
        if r.state != "ok":
            counts[r.state] += r["count"]
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
    expected = _expected(spark, family, resolved, committed)
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


def _expected(spark: Any, family: Family, resolved: Any, committed: Mapping[Edge, Mapping[int, int | None]]) -> Any:
    """(c, t, key, low, high): copies each cluster must hold (low) and may hold (high), per origin record."""
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
            .join(F.broadcast(marks.filter(F.col("mr") == e.route)), F.col("p") == F.col("mp"), "left")
            .select(F.lit(e.destination).alias("c"), F.lit(e.destination_topic).alias("t"), *key,
                    F.expr("CASE WHEN o < coalesce(mo, -1) THEN 1 ELSE 0 END").alias("low"), F.lit(1).alias("high"))
        )
        parts.append(carried)
    expected = parts[0]
    for part in parts[1:]:
        expected = expected.unionByName(part)
    return expected.groupBy("c", "t", *key).agg(F.sum("low").alias("low"), F.sum("high").alias("high"))


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
        session = spark()
        for family in families(edges):
            stderr_progress(f"family {family.name}: routes {', '.join(sorted({e.route for e in family.edges}))}")
            verdict.families.append(check_family(session, family, sides, bounds, committed))
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
    for family in verdict.families:
        for cluster, counts in family["clusters"].items():
            shown = ", ".join(f"{p} {counts[p]}" for p in PROBLEMS if counts[p]) or "exact"
            print(f"{family['family']} @ {cluster}: {counts['originals']:,} originals, {counts['copies']:,} copies; "
                  f"{shown}", flush=True)
        for sample in family["samples"]:
            print(f"  {sample['problem']}: {json.dumps(sample, sort_keys=True)}", flush=True)
    print(f"{verdict.status}: {len(verdict.families)} topic famil{'y' if len(verdict.families) == 1 else 'ies'}, "
          f"{verdict.problems} problem(s) in {document['duration_s']:.1f}s; report {path}", flush=True)
    return 1 if verdict.problems else 0
