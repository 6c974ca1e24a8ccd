"""One answer to "is it healthy?": ``GET /status`` (JSON) and ``GET /ui`` (the same, as an HTML page).

:func:`evaluate_routes` is pure: from one :class:`View` per route (ZooKeeper, the leader, the
verifier) it builds the deployment's document and lists the *problems* (what needs a person),
each route's prefixed with ``route <id>:`` when the deployment has several. ``ureplicator
status`` exits non-zero exactly when that list is not empty. The Blueprint reads a view of
every route in the registry (ZooKeeper, a source consumer per route for the age of the oldest
unmirrored record, the route's verifier summary) and renders it; the page uses the API's
rules (read-only GETs need no token).

Lag in seconds is the age of the oldest record not yet mirrored: the CreateTime of the record
at the committed offset. It is 0 when the lag is 0 and ``None`` ("unknown") when the record
could not be read in time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from flask import Blueprint, Response, abort, current_app, jsonify, render_template_string, request, send_file

from ureplicator.common import autherrors, kafka, logs, zk
from ureplicator.common.config import IMPLICIT_ROUTE
from ureplicator.common.zkschema import Assignment, TopicRecord, WorkerStatus
from ureplicator.controller import heartbeat

log = logs.get(__name__)

# How long a worker that vanished stays on the page (as "lost") after its last sighting.
LOST_MEMORY_S = 900.0
# Partitions whose age the status reads per request (one fetch each); the rest say "unknown".
MAX_AGE_PROBES = 200


@dataclass(frozen=True)
class View:
    """Everything :func:`evaluate` reads; no client, no clock."""

    pipeline: str
    topics: dict[str, TopicRecord]
    live: frozenset[str]
    blacklisted_workers: frozenset[str]
    blacklisted_partitions: frozenset[str]
    assignments: dict[str, Assignment]
    statuses: dict[str, WorkerStatus]
    lost: dict[str, float] = field(default_factory=dict)  # worker -> last seen (epoch s), gone now
    leader: str | None = None
    is_leader: bool = False
    zookeeper: str = "connected"
    withheld: frozenset[tuple[str, int]] | None = None  # known on the leader only
    lag_seconds: dict[tuple[str, int], float] = field(default_factory=dict)
    noprogress_threshold_s: float = 60.0
    group_sync_enabled: bool = False
    group_sync_interval_s: float = 60.0
    group_sync_last: float | None = None
    leader_since: float | None = None
    verification: dict[str, Any] | None = None
    verification_configured: bool = False
    report_url: str | None = None
    # cluster alias -> what it said, when it refused the controller's credentials (common.autherrors)
    auth_failures: dict[str, str] = field(default_factory=dict)
    heartbeat_enabled: bool = False
    freshness_s: float | None = None  # age of the newest heartbeat on the destination (controller/heartbeat.py)
    # per route: the age of the newest heartbeat on its destination (None: none seen yet)
    freshness_routes: dict[str, float | None] = field(default_factory=dict)
    rpo_s: float = 300.0
    route: str = IMPLICIT_ROUTE  # the route whose topics, workers and partitions this view holds
    # live worker -> (copy loop, why not the C loop), from its registration ("" from older workers)
    loops: dict[str, tuple[str, str]] = field(default_factory=dict)


def evaluate(view: View, now: float) -> dict[str, Any]:
    """The status document of a deployment with one route."""
    return evaluate_routes([view], now)


def evaluate_routes(views: list[View], now: float, unreadable: dict[str, str] | None = None) -> dict[str, Any]:
    """The deployment's status document from one view per route; ``healthy`` is False when ``problems`` is not empty.

    The first view's deployment-wide facts (ZooKeeper, leader, credentials, freshness) speak for
    all. With several routes every worker and partition row names its ``route``, the
    ``withheld``/``unowned``/``stuck`` keys read ``<route>/<topic>:<partition>``, ``routes``
    holds each route's section, and the top-level ``group_sync`` and ``verification`` are those
    of the route that needs attention most (named in their ``route``). ``unreadable``: routes
    this controller could not read (route id -> why), each a problem.
    """
    unreadable = unreadable or {}
    first = views[0]
    several = len(views) + len(unreadable) > 1
    problems: list[str] = []
    warnings: list[str] = []
    if first.zookeeper != "connected":
        problems.append(f"this controller's ZooKeeper session is {first.zookeeper}")
    if first.leader is None:
        problems.append("no controller is the leader: assignments do not change")
    for alias, message in sorted(first.auth_failures.items()):
        problems.append(f"cluster {alias} refused this controller's credentials: {message}")
    sections = {view.route: _route_section(view, now) for view in views}
    workers: list[dict[str, Any]] = []
    partitions: list[dict[str, Any]] = []
    keys: dict[str, list[str]] = {"withheld": [], "unowned": [], "stuck": []}
    for route, section in sections.items():
        problems += [f"route {route}: {p}" if several else p for p in section["problems"]]
        warnings += [f"route {route}: {w}" if several else w for w in section["warnings"]]
        workers += [{**w, "route": route} for w in section.pop("workers")]
        partitions += [{**p, "route": route} for p in section.pop("partitions")]
        for name, found in keys.items():
            found += [f"{route}/{k}" if several else k for k in section[name] or ()]
    for route, why in sorted(unreadable.items()):
        problems.append(f"route {route}: this controller cannot read it: {why}")
    freshness = _freshness(first, now, problems)
    attention = sorted(sections.items(), key=lambda item: _attention(item[1]))
    group_sync = next(({**s["group_sync"], "route": r} if several else s["group_sync"]
                       for r, s in attention if s["group_sync"] is not None), None)
    verification = next(({**s["verification"], "route": r} if several else s["verification"]
                         for r, s in attention if s["verification"] is not None), None)
    return {
        "pipeline": first.pipeline,
        "generated_at": _iso(now),
        "healthy": not problems,
        "problems": problems,
        "warnings": warnings,
        "zookeeper": first.zookeeper,
        "leader": first.leader,
        "workers": workers,
        "partitions": partitions,
        "withheld": keys["withheld"] if first.withheld is not None else None,
        "unowned": keys["unowned"],
        "stuck": keys["stuck"],
        "freshness": freshness,
        "group_sync": group_sync,
        "verification": verification,
        "verification_configured": first.verification_configured,
        "auth_failures": first.auth_failures,
        "routes": {r: {**s, "healthy": not s["problems"]} for r, s in sections.items()}
        | {r: {"healthy": False, "problems": [f"this controller cannot read it: {why}"]}
           for r, why in unreadable.items()},
    }


def _attention(section: dict[str, Any]) -> tuple[int, float]:
    """Sort key: a route with a failed verification or a stale group sync first, then the oldest sync."""
    sync, verification = section["group_sync"] or {}, section["verification"] or {}
    bad = verification.get("status") in ("FAIL", "ERROR") or bool(sync.get("stale"))
    age = sync.get("age_s")
    return (0 if bad else 1, -(age if age is not None else float("inf")) if sync else 0.0)


def _route_section(view: View, now: float) -> dict[str, Any]:
    """One route's rows and its own problems (workers, partitions, group sync, verification)."""
    problems: list[str] = []
    owners = {tp: w for w, a in view.assignments.items() for tp in a.partitions}
    applied = {tp: (w, st) for w, s in view.statuses.items() for tp, st in s.partitions.items()}

    workers = _workers(view, owners, now)
    problems += [f"worker {w['worker']} is {w['health']}: {w['detail']}" for w in workers if w["problem"]]
    # Healthy, but slower than it should be: every record through the Python loop (docs/operations.md,
    # "Which loop am I on").
    warnings = [f"worker {w['worker']} runs the Python copy loop, not the C loop: "
                f"{w['loop_reason'] or 'no reason given'}" for w in workers if w["loop"] == "python"]

    partitions, withheld, unowned, stuck = [], [], [], []
    for name, record in sorted(view.topics.items()):
        for p in range(record.partitions):
            row = _partition(view, record, p, owners, applied, now)
            partitions.append(row)
            key = f"{name}:{p}"
            if row["health"] == "withheld":
                withheld.append(key)
            elif row["health"] in ("unowned", "owner down"):
                unowned.append(key)
            elif row["health"] in ("stuck", "error"):
                stuck.append(key)
    if unowned:
        problems.append(f"{len(unowned)} partition(s) are not being mirrored: {_few(unowned)}")
    if stuck:
        problems.append(f"{len(stuck)} partition(s) are stuck or failing: {_few(stuck)}")

    group_sync = None
    if view.group_sync_enabled:
        age = None if not view.group_sync_last else round(now - view.group_sync_last, 1)
        stale_after = 3 * view.group_sync_interval_s
        stale = view.is_leader and (
            age > stale_after if age is not None
            else view.leader_since is not None and now - view.leader_since > stale_after
        )
        group_sync = {"last_sync_at": _iso(view.group_sync_last) if view.group_sync_last else None,
                      "age_s": age, "stale": bool(stale)}
        if stale:
            problems.append(f"consumer-group sync has not completed for {age if age is not None else 'ever'}"
                            f"{'s' if age is not None else ''} (interval {view.group_sync_interval_s:.0f}s)")

    verification = None
    if view.verification is not None:
        finished = view.verification.get("finished_at")
        verification = {
            "run_id": view.verification.get("run_id"),
            "status": view.verification.get("status"),
            "finished_at": finished,
            "age_s": _age(finished, now),
            "report": view.report_url,
        }
        if verification["status"] in ("FAIL", "ERROR"):
            problems.append(f"the last verification ({verification['run_id']}) is {verification['status']}")
    return {
        "problems": problems,
        "warnings": warnings,
        "workers": workers,
        "partitions": partitions,
        "withheld": withheld if view.withheld is not None else None,
        "unowned": unowned,
        "stuck": stuck,
        "group_sync": group_sync,
        "verification": verification,
    }


def _freshness(view: View, now: float, problems: list[str]) -> dict[str, Any] | None:
    """The heartbeat's verdict over every route (deployment-wide); its problem appended to ``problems``."""
    freshness = None
    if view.heartbeat_enabled:
        late = view.freshness_s is not None and view.freshness_s > view.rpo_s
        never = view.freshness_s is None and view.leader_since is not None and now - view.leader_since > view.rpo_s
        freshness = {"age_s": None if view.freshness_s is None else round(view.freshness_s, 1),
                     "rpo_s": view.rpo_s, "late": late or never,
                     "routes": {r: None if a is None else round(a, 1)
                                for r, a in sorted(view.freshness_routes.items())}}
        # With several routes the stalest one is the pipeline's freshness: name it.
        stalest = [r for r, a in view.freshness_routes.items() if a is None or a == view.freshness_s]
        which = f" (route {', '.join(sorted(stalest))})" if len(view.freshness_routes) > 1 and stalest else ""
        if late:
            problems.append(f"freshness: the newest heartbeat on the destination is {view.freshness_s:.0f}s old "
                            f"(RPO {view.rpo_s:.0f}s){which}")
        elif never:
            problems.append(f"freshness: no heartbeat has reached the destination in {view.rpo_s:.0f}s (RPO){which}")
    return freshness


def _workers(view: View, owners: dict[tuple[str, int], str], now: float) -> list[dict[str, Any]]:
    rows = []
    names = set(view.live) | set(view.assignments) | set(view.lost) | set(view.blacklisted_workers)
    for worker in sorted(names):
        status = view.statuses.get(worker)
        assignment = view.assignments.get(worker)
        assigned = sum(1 for w in owners.values() if w == worker)
        live = worker in view.live
        if worker in view.blacklisted_workers:
            health, detail, problem = "draining", "blacklisted: gets no partitions", False
        elif not live:
            since = view.lost.get(worker)
            gone = f" for {now - since:.0f}s" if since else ""
            health, problem = "lost", bool(assigned)
            detail = (f"not running{gone}; {assigned} partition(s) wait for it (restart grace)" if assigned
                      else f"not running{gone}; holds no partitions")
        elif status is None:
            health, detail, problem = "starting", "registered, no status yet", False
        else:
            errors = [st.error for st in status.partitions.values() if st.error]
            synced = assignment is None or (status.generation == assignment.generation
                                            and status.owned == assignment.partitions)
            if errors:
                health, detail, problem = "error", errors[0], True
            elif not synced:
                health, detail, problem = "syncing", "applying a new assignment", False
            else:
                health, detail, problem = "ok", "", False
        rows.append({
            "worker": worker, "live": live, "health": health, "detail": detail, "problem": problem,
            "blacklisted": worker in view.blacklisted_workers, "assigned": assigned,
            "applied": len(status.partitions) if status else 0,
            "generation": status.generation if status else None,
            "records_per_s": round(sum(s.records_per_s for s in status.partitions.values()), 1) if status else 0.0,
            "lag": sum(max(s.lag, 0) for s in status.partitions.values()) if status else None,
            # "native", "python", or None: not running, or registered by a worker older than the field
            "loop": (view.loops.get(worker, ("", ""))[0] or None) if live else None,
            "loop_reason": view.loops.get(worker, ("", ""))[1] if live else "",
        })
    return rows


def _partition(view: View, record: TopicRecord, p: int, owners: dict[tuple[str, int], str],
               applied: dict[tuple[str, int], tuple[str, Any]], now: float) -> dict[str, Any]:
    tp = (record.topic, p)
    owner = owners.get(tp)
    applied_by, st = applied.get(tp, (None, None))
    lag = st.lag if st is not None and st.lag >= 0 else None
    if lag == 0:
        lag_s: float | None = 0.0
    else:
        lag_s = view.lag_seconds.get(tp)
    stalled_for = now - st.last_progress_at if st is not None and st.last_progress_at else None
    if record.state == "paused":
        health, detail = "paused", "topic paused"
    elif f"{record.topic}:{p}" in view.blacklisted_partitions:
        health, detail = "blacklisted", "partition blacklisted"
    elif owner is None and view.withheld is not None and tp in view.withheld:
        health, detail = "withheld", "in hand-off: waits for its previous owner to commit"
    elif owner is None:
        health, detail = "unowned", "no worker is assigned"
    elif owner not in view.live:
        health, detail = "owner down", f"owner {owner} is not running"
    elif st is not None and st.error:
        health, detail = "error", st.error
    elif st is not None and lag and stalled_for is not None and stalled_for > view.noprogress_threshold_s:
        health, detail = "stuck", f"no progress for {stalled_for:.0f}s with {lag} records to mirror"
    elif applied_by is None:
        health, detail = "starting", f"assigned to {owner}, not applied yet"
    else:
        health, detail = "ok", ""
    return {
        "topic": record.topic, "partition": p, "destination": record.destination, "owner": owner,
        "applied_by": applied_by, "committed": st.committed if st is not None and st.committed >= 0 else None,
        "lag_records": lag, "lag_seconds": None if lag_s is None else round(lag_s, 1),
        "records_per_s": round(st.records_per_s, 1) if st is not None else None,
        "last_error": st.error if st is not None else None, "health": health, "detail": detail,
        "problem": health in ("unowned", "owner down", "error", "stuck"),
    }


def auth_failures(ctl: Any) -> dict[str, str]:
    """Per cluster alias, what the controller's own admin clients heard when a cluster refused its
    credentials or an ACL (common.autherrors): a wrong password is not "healthy". Every cluster a
    declared route touches is asked, through the controller's shared admin clients."""
    admins = {ctl.config.source.alias: ctl.source_admin, ctl.config.destination.alias: ctl.destination_admin}
    if ctl.admins_for is not None:
        for route in ctl.config.routes:
            for alias in (route.source, route.destination):
                if alias not in admins and alias in ctl.config.clusters:
                    admins[alias] = ctl.admins_for(alias)
    found = {}
    for alias, client in sorted(admins.items()):
        watch = autherrors.watch_of(client) if client is not None else None
        failure = watch.failure() if watch is not None else None
        if failure is not None:
            found[alias] = f"{failure[0]} failed: {failure[1]}"
    return found


def _stalest(ages: dict[str, float | None]) -> float | None:
    """The pipeline's freshness: its stalest route's age; None while a route has seen no heartbeat yet."""
    if not ages or any(a is None for a in ages.values()):
        return None
    return max(a for a in ages.values() if a is not None)


def _few(items: list[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def _age(iso: Any, now: float) -> float | None:
    if not isinstance(iso, str):
        return None
    try:
        parsed = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return round(now - parsed.timestamp(), 1)


# --- reading the view ----------------------------------------------------------------------------


class _Reader:
    """The I/O side: ZooKeeper reads, workers' last sightings, and record ages from each route's source."""

    def __init__(self) -> None:
        self.reports_dir: Path | None = None
        self._seen: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._consumers: dict[tuple[str, str], Any] = {}
        self._leader_since: float | None = None

    def views(self, ctl: Any, now: float) -> tuple[list[View], dict[str, str]]:
        """A view of every route in the registry (the first route first), and the routes that could not be read."""
        from ureplicator.controller.api import ApiError  # the API module imports this one

        routes = sorted(ctl.routes(), key=lambda r: (r != ctl.config.route_id, r))
        views, unreadable = [], {}
        for route_id in routes or [ctl.config.route_id]:
            try:
                context = ctl.route_context(route_id) if len(routes) > 1 else ctl
            except ApiError as exc:  # e.g. a route between clusters this controller's file does not declare
                unreadable[route_id] = exc.message
                continue
            views.append(self.view(ctl, context, now))
        if not views:  # nothing readable: the deployment-wide facts still need a view
            views.append(self.view(ctl, ctl, now))
        return views, unreadable

    def view(self, ctl: Any, route: Any, now: float) -> View:
        """One route's view; ``route`` is the controller itself or a RouteContext (``config``, ``zk``, ``paths``)."""
        config, client, paths = route.config, route.zk, route.paths
        route_id = config.route_id or IMPLICIT_ROUTE
        self.reports_dir = reports_dir(ctl)
        topics = zk.read_topics(client, paths)
        live = frozenset(zk.live_workers(client, paths))
        loops = {w: (info.loop, info.loop_reason) for w, info in zk.read_worker_infos(client, paths).items()}
        assignments = zk.read_assignments(client, paths)
        statuses = zk.read_statuses(client, paths)
        with self._lock:
            for worker in live:
                self._seen[(route_id, worker)] = now
            lost = {w: t for (r, w), t in self._seen.items()
                    if r == route_id and w not in live and now - t < LOST_MEMORY_S}
            for key in [k for k, t in self._seen.items() if now - t >= LOST_MEMORY_S]:
                del self._seen[key]
        state = ctl.leadership.state
        if state.is_leader and self._leader_since is None:
            self._leader_since = now
        elif not state.is_leader:
            self._leader_since = None
        loop = route.leadership  # the route's own loop holds what it withholds (a RouteSet: ask it for the route's)
        if hasattr(loop, "route"):
            loop = loop.route(route_id) or loop
        withheld = getattr(getattr(loop, "state", None), "withheld", ())
        registry = ctl.leadership.metrics.registry
        last_sync = registry.get_sample_value("ureplicator_groupsync_last_sync_timestamp_seconds",
                                              {"route": route_id})
        verification, report_url = self._verification(route_id)
        route_ages = heartbeat.ages(registry, config.pipeline)
        return View(
            pipeline=config.pipeline, topics=topics, live=live,
            blacklisted_workers=frozenset(client.get_children(paths.blacklist_workers)),
            blacklisted_partitions=frozenset(client.get_children(paths.blacklist_partitions)),
            assignments=assignments, statuses=statuses, lost=lost,
            leader=ctl.leadership.leader_id(), is_leader=state.is_leader,
            zookeeper=str(client.state).lower(),
            withheld=frozenset(withheld) if state.is_leader else None,
            lag_seconds=self._lag_seconds(route, statuses),
            noprogress_threshold_s=config.controller.noprogress_threshold_s,
            group_sync_enabled=config.controller.group_sync.enabled,
            group_sync_interval_s=config.controller.group_sync.interval_s,
            group_sync_last=last_sync or None, leader_since=self._leader_since,
            verification=verification, verification_configured=self.reports_dir is not None,
            report_url=report_url, auth_failures=auth_failures(ctl),
            heartbeat_enabled=config.controller.heartbeat_interval_s > 0,
            freshness_s=_stalest(route_ages), freshness_routes=route_ages,
            rpo_s=config.controller.rpo_s, route=route_id, loops=loops,
        )

    def _verification(self, route_id: str) -> tuple[dict[str, Any] | None, str | None]:
        if self.reports_dir is None:
            return None, None
        from ureplicator.controller.verification_api import route_reports_dir
        from ureplicator.reports.store import LATEST_HTML, ReportStore

        directory = route_reports_dir(self.reports_dir, route_id)
        summary = ReportStore(directory).summary()
        url = ("/ui/verification" if route_id == IMPLICIT_ROUTE else f"/ui/verification?route={route_id}") \
            if (directory / LATEST_HTML).is_file() else None
        return summary, url

    def _lag_seconds(self, route: Any, statuses: dict[str, WorkerStatus]) -> dict[tuple[str, int], float]:
        """Age of the record at each lagging partition's committed offset (its CreateTime), on the route's source."""
        wanted = sorted({tp: st.committed for s in statuses.values() for tp, st in s.partitions.items()
                         if st.lag > 0 and st.committed >= 0}.items())[:MAX_AGE_PROBES]
        if not wanted:
            return {}
        config = route.config
        ages: dict[tuple[str, int], float] = {}
        with self._lock:
            try:
                key = (config.route_id, config.source.alias)
                if key not in self._consumers:
                    # Never commits: it only reads one record per lagging partition.
                    self._consumers[key] = kafka.consumer(config.source, f"{config.consumer_group}.status",
                                                          "ureplicator-status", **{"auto.offset.reset": "earliest"})
                consumer = self._consumers[key]
                consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in wanted])
                deadline = time.monotonic() + 3.0
                while len(ages) < len(wanted) and time.monotonic() < deadline:
                    for message in consumer.consume(num_messages=len(wanted), timeout=0.5):
                        if message.error() is None:
                            key_tp = (message.topic(), message.partition())
                            if key_tp not in ages:
                                kind, ts = message.timestamp()
                                if kind and ts > 0:
                                    ages[key_tp] = max(0.0, time.time() - ts / 1000.0)
                consumer.unassign()
            except KafkaException as exc:
                log.warning("status_lag_seconds_unavailable", route=config.route_id, error=str(exc.args[0]))
        return ages


def reports_dir(ctl: Any) -> Path | None:
    """``controller.verification_dir``: where ``ureplicator verify --output`` writes."""
    directory = ctl.config.controller.verification_dir
    return Path(directory) if directory else None


def make_blueprint() -> Blueprint:
    """``GET /status``, ``GET /ui`` (HTML) and ``GET /ui/verification`` (the newest report's page)."""
    blueprint = Blueprint("status", __name__)
    template = (Path(__file__).parent / "status_page.html").read_text(encoding="utf-8")
    reader = _Reader()

    def document() -> dict[str, Any]:
        now = time.time()
        views, unreadable = reader.views(current_app.config["controller"], now)
        return evaluate_routes(views, now, unreadable)

    @blueprint.get("/status")
    def status() -> Any:
        return jsonify(document())

    @blueprint.get("/ui")
    def page() -> Any:
        body = render_template_string(template, status=document())  # autoescaped, as every .html
        return Response(body, mimetype="text/html")

    @blueprint.get("/ui/verification")
    def verification_report() -> Any:
        from ureplicator.controller.verification_api import route_reports_dir
        from ureplicator.reports.store import LATEST_HTML

        ctl = current_app.config["controller"]
        directory = reports_dir(ctl)
        route = request.args.get("route", "")
        if route and route not in ctl.routes():  # named in a path: only a known route id
            abort(404, f"unknown route {route!r}")
        if directory is not None:
            directory = route_reports_dir(directory, route)
        if directory is None or not (directory / LATEST_HTML).is_file():
            abort(404, "no verification report yet")
        return send_file(directory / LATEST_HTML, mimetype="text/html")

    return blueprint
