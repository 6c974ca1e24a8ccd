"""The OpenAPI 3.1 document of the admin REST API (served at /openapi.json, checked by the tests)."""

from __future__ import annotations

from typing import Any


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Any], required: list[str] | None = None, extra: bool = False) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required if required is not None else list(props),
        "additionalProperties": extra,
    }


_INT = {"type": "integer"}
_NINT = {"type": ["integer", "null"]}
_UINT = {"type": "integer", "minimum": 0}
_STR = {"type": "string"}
_NSTR = {"type": ["string", "null"]}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_TP_LIST = {"type": "array", "items": _STR}

_RECORD = {
    "topic": _STR, "destination": _STR, "partitions": _INT,
    "state": {"enum": ["active", "paused"]}, "added_at": _STR, "options": {"type": "object"},
}
_OFFSET = {"topic": _STR, "partition": _INT, "committed": _NINT, "log_start": _INT, "end": _INT, "lag": _INT}

SCHEMAS: dict[str, Any] = {
    "Error": _obj({"error": _obj({"code": _INT, "message": _STR})}),
    "TopicRecord": _obj(_RECORD),
    "TopicAdded": _obj({**_RECORD, "destination_topic": {"enum": ["created", "grown", "exists"]}}),
    "TopicList": _obj({"topics": {"type": "array", "items": _ref("TopicRecord")}}),
    "PartitionStatus": {"type": ["object", "null"], "properties": {
        "committed": _INT, "records_per_s": _NUM, "bytes_per_s": _NUM, "lag": _INT,
        "error": _NSTR, "last_progress_at": _NUM,
    }},
    "TopicDetail": _obj({**_RECORD, "assignment": {"type": "array", "items": _obj({
        "partition": _INT, "worker": _NSTR, "applied_by": _NSTR, "status": _ref("PartitionStatus"),
    })}}),
    "Removed": _obj({"topic": _STR, "removed": _BOOL}),
    "Health": _obj({
        "status": {"enum": ["ok", "unavailable", "credentials refused"]}, "zookeeper": _STR, "leader": _NSTR,
        "is_leader": _BOOL, "generation": _INT,
        "auth_failures": {"type": "object", "additionalProperties": _STR},
    }),
    "Liveness": _obj({"status": _STR, "election_thread": _BOOL}),
    "Instances": _obj({"instances": {"type": "array", "items": _obj({
        "worker": _STR, "live": _BOOL, "blacklisted": _BOOL, "assigned": _INT, "applied": _INT,
        "generation": _NINT, "bytes_per_s": _NUM, "records_per_s": _NUM,
    })}}),
    "RebalanceRequested": _obj({"rebalance": {"const": "requested"}}),
    "WorkerBlacklist": _obj({"worker": _STR, "blacklisted": _BOOL}),
    "Validation": _obj({
        "ok": _BOOL, "mismatched_workers": _INT, "withheld": {"type": ["array", "null"], "items": _STR},
        "workers": {"type": "array", "items": _obj({
            "worker": _STR, "desired_generation": _NINT, "applied_generation": _NINT,
            "missing": _TP_LIST, "extra": _TP_LIST, "ok": _BOOL,
        })},
    }),
    "OffsetRow": _obj(_OFFSET),
    "Offsets": _obj({"group": _STR, "offsets": {"type": "array", "items": _ref("OffsetRow")}, "total_lag": _INT}),
    "Offset": _obj({**_OFFSET, "group": _STR}),
    "NoProgress": _obj({
        "threshold_s": _NUM,
        "stalled": {"type": "array", "items": _obj({
            "topic": _STR, "partition": _INT, "worker": _STR, "lag": _INT, "error": _NSTR,
            "stalled_for_s": {"type": ["number", "null"]},
        })},
        "unowned": {"type": "array", "items": _obj({"topic": _STR, "partition": _INT})},
    }),
    "Blacklist": _obj({
        "topics": _TP_LIST,
        "partitions": {"type": "array", "items": _obj({"topic": _STR, "partition": _INT})},
        "workers": _TP_LIST,
    }),
    "BlacklistChange": _obj({"topic": _STR, "partition": _NINT, "blacklisted": _BOOL}),
    "Autobalancing": _obj({"autobalancing": _BOOL}),
    "RateLimit": _obj({"records_per_s": _UINT, "bytes_per_s": _UINT}),
    "Workload": _obj({"workers": {"type": "object", "additionalProperties": _obj({
        "bytes_per_s": _NUM, "records_per_s": _NUM, "partitions": _INT, "lag": _INT,
    })}}),
    "AdminResult": {"oneOf": [_ref("Autobalancing"), _ref("RateLimit"), _ref("Workload")]},
    # Consumer-group failover (failover/, docs/failover.md)
    "GroupList": _obj({"groups": {"type": "array", "items": _obj({
        "group": _STR, "state": _STR, "mirrored_partitions": _UINT,
    })}}),
    "GroupPartition": _obj({
        "topic": _STR, "partition": _UINT, "destination_topic": _STR, "source_committed": _UINT,
        "destination_offset": _UINT, "destination_end": _UINT, "mirrored_through": _UINT, "source_end": _NINT,
        "state": {"enum": ["behind", "at", "ahead"]}, "ahead_by": _UINT, "destination_lag": _UINT,
        "unmirrored": {"type": ["array", "null"], "items": _UINT, "minItems": 2, "maxItems": 2},
        "unmirrored_records": _UINT,
    }),
    "GroupTranslation": _obj({
        "group": _STR,
        "partitions": {"type": "array", "items": _ref("GroupPartition")},
        "summary": _obj({"partitions": _UINT, "behind": _UINT, "at": _UINT, "ahead": _UINT, "ahead_by": _UINT,
                         "unmirrored_records": _UINT}),
    }),
    "GroupSync": _obj({
        "group": _STR, "refused": _NSTR,
        "committed": {"type": "array", "items": _obj({"topic": _STR, "partition": _UINT, "offset": _UINT})},
        "kept": {"type": "array", "items": _obj({"topic": _STR, "partition": _UINT, "reason": _STR})},
        "ahead": {"type": "array", "items": _ref("GroupPartition")},
    }),
    "GroupSyncRequest": _obj({"force": _BOOL}, required=[]),
    # Clusters and routes (docs/routes.md)
    "ClusterList": _obj({"clusters": {"type": "array", "items": _obj({"alias": _STR, "bootstrap_servers": _STR})}}),
    "Route": _obj({
        "id": _STR, "source": _STR, "destination": _STR,
        "topic_naming": {"enum": ["identity", "prefix", "mapping"]},
        "topic_mapping": {"type": "object", "additionalProperties": _STR},
        "forward": {"enum": ["origin", "transit"]},
        "workers": _obj({"min": _UINT, "max": _UINT}), "shared": _BOOL,
        "state": {"enum": ["running", "paused", "waiting_for_workers"]},
        "live_workers": _UINT, "topics": _UINT, "declared_in": {"enum": ["config", "api"]},
        "zookeeper_root": _STR, "consumer_group": _STR, "created_at": _STR,
    }),
    "RouteList": _obj({"routes": {"type": "array", "items": _ref("Route")}}),
    "RouteRequest": _obj({
        "id": _STR, "source": _STR, "destination": _STR,
        "topic_naming": {"enum": ["identity", "prefix", "mapping"]},
        "topic_mapping": {"type": "object", "additionalProperties": _STR},
        "forward": {"enum": ["origin", "transit"]},
        "workers": _obj({"min": _UINT, "max": _UINT}, required=[]), "shared": _BOOL,
    }, required=["id", "source", "destination"]),
    "RouteChange": _obj({
        "topic_naming": {"enum": ["identity", "prefix", "mapping"]},
        "topic_mapping": {"type": "object", "additionalProperties": _STR},
        "forward": {"enum": ["origin", "transit"]},
        "workers": _obj({"min": _UINT, "max": _UINT}, required=[]), "shared": _BOOL,
    }, required=[]),
    "RouteDeleted": _obj({"route": _STR, "deleted": _BOOL}),
    "TopicRequest": {
        "type": "object",
        "properties": {
            "topic": _STR,
            "numPartitions": {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^[0-9]+$"}]},
            "destination": _STR,
        },
    },
}


def _json(schema: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": _ref(schema)}}}


def _op(summary: str, ok: dict[str, str], errors: tuple[int, ...] = (), body: str | None = None,
        admin: bool = False) -> dict[str, Any]:
    responses: dict[str, Any] = {code: {"description": desc.split("|")[0], **_json(desc.split("|")[1])}
                                 for code, desc in ok.items()}
    codes = set(errors) | ({401, 403} if admin else set()) | {503}
    for code in sorted(codes):
        responses[str(code)] = {"description": "error", **_json("Error")}
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if body:
        op["requestBody"] = {"required": True, **_json(body)}
    if admin:
        op["security"] = [{"adminToken": []}]
    return op


PATHS: dict[str, dict[str, Any]] = {
    "/topics": {
        "get": _op("List mirrored topics", {"200": "topics|TopicList"}),
        "post": _op("Start mirroring a topic", {"201": "added|TopicAdded"}, (400, 404, 409, 502), "TopicRequest", True),
        "put": _op("Expand a topic to its source's partition count", {"200": "expanded|TopicRecord"},
                   (400, 404, 502), "TopicRequest", True),
    },
    "/topics/{topic}": {
        "get": _op("Show a topic with its partition owners", {"200": "topic|TopicDetail"}, (400, 404)),
        "post": _op("Start mirroring the named topic", {"201": "added|TopicAdded"}, (400, 404, 409, 502), None, True),
        "delete": _op("Stop mirroring (blacklists it)", {"200": "removed|Removed"}, (400, 404), None, True),
    },
    "/topics/{topic}/{action}": {
        "post": _op("Pause or resume a topic (action: pause|resume)", {"200": "topic|TopicRecord"}, (400, 404),
                    None, True),
    },
    "/health": {"get": _op("Readiness: ZooKeeper connected, a leader known, no cluster refusing the credentials",
                           {"200": "healthy|Health", "503": "not|Health"})},
    "/healthz": {"get": _op("Liveness: the election thread runs (independent of ZooKeeper)",
                            {"200": "alive|Liveness", "503": "stopped|Liveness"})},
    "/instances": {
        "get": _op("Workers with their assignment and rates", {"200": "workers|Instances"}),
        "post": _op("Rebalance now", {"202": "requested|RebalanceRequested"}, (), None, True),
    },
    "/instances/{worker}": {
        "post": _op("Whitelist a blacklisted worker", {"200": "worker|WorkerBlacklist"}, (400, 404), None, True),
        "delete": _op("Blacklist (drain) a worker", {"200": "worker|WorkerBlacklist"}, (400, 404, 409), None, True),
    },
    "/validation": {"get": _op("Desired vs applied assignment", {"200": "validation|Validation"})},
    "/offset": {"get": _op("Committed offset, end offset and lag of every partition", {"200": "offsets|Offsets"})},
    "/offset/{topic}/{partition}": {
        "get": _op("Committed offset, end offset and lag of one partition", {"200": "offset|Offset"}, (400, 404)),
    },
    "/noprogress": {"get": _op("Partitions that stopped progressing or have no owner", {"200": "list|NoProgress"})},
    "/blacklist": {
        "get": _op("Blacklisted topics, partitions and workers", {"200": "blacklist|Blacklist"}),
        "post": _op("Blacklist or whitelist a topic or partition", {"200": "changed|BlacklistChange"}, (400, 404),
                    None, True),
    },
    "/verification": {
        "get": {"summary": "Summary of the newest verifier report (controller.verification_dir)",
                "responses": {"200": {"description": "summary", "content": {"application/json": {
                    "schema": {"type": "object"}}}}, "404": {"description": "no report", **_json("Error")}}},
    },
    "/verification/history": {
        "get": {"summary": "Past verifier runs, newest first (?limit=N, 1..1000)",
                "responses": {"200": {"description": "runs", "content": {"application/json": {
                    "schema": _obj({"runs": {"type": "array", "items": {"type": "object"}}})}}},
                    "400": {"description": "bad limit", **_json("Error")},
                    "404": {"description": "no run", **_json("Error")}}},
    },
    "/groups": {"get": _op("Consumer groups on the source with offsets on mirrored topics",
                            {"200": "groups|GroupList"})},
    "/groups/{group}/translation": {
        "get": _op("A group's committed source offsets translated to exact destination offsets",
                   {"200": "translation|GroupTranslation"}, (400, 404)),
    },
    "/groups/{group}/sync": {
        "post": _op("Commit the translated offsets for the group on the destination (never while it has members "
                    "there; never backwards unless force)", {"200": "synced|GroupSync"}, (400, 404, 409), None, True),
    },
    "/admin/{op}": {
        "get": _op("autobalancing_status | workloadinfo | rate_limit", {"200": "result|AdminResult"}, (404,)),
        "post": _op("enable_autobalancing | disable_autobalancing | rate_limit", {"200": "result|AdminResult"},
                    (400, 404), None, True),
    },
}


# The endpoints of one route: served bare (the only route; or named by ?route=<id> or
# ?src=<alias>&dst=<alias>; a 400 lists the routes when there are several) and under /routes/{route}.
ROUTE_SCOPED = ("/topics", "/topics/{topic}", "/topics/{topic}/{action}", "/instances", "/instances/{worker}",
                "/validation", "/offset", "/offset/{topic}/{partition}", "/noprogress", "/blacklist", "/admin/{op}",
                "/groups", "/groups/{group}/translation", "/groups/{group}/sync", "/verification",
                "/verification/history")

ROUTES: dict[str, dict[str, Any]] = {
    "/clusters": {"get": _op("The deployment's clusters (aliases and bootstrap servers; no properties)",
                             {"200": "clusters|ClusterList"})},
    "/routes": {
        "get": _op("Every route with its state (running | paused | waiting_for_workers)", {"200": "routes|RouteList"}),
        "post": _op("Add a route; 400 names an unknown alias, a taken pair or id, or the path of a loop",
                    {"201": "added|Route"}, (400,), "RouteRequest", True),
    },
    "/routes/{route}": {
        "get": _op("One route with its state", {"200": "route|Route"}, (404,)),
        "patch": _op("Change naming, forwarding, worker bounds or shared (id and clusters are immutable)",
                     {"200": "changed|Route"}, (400, 404, 409), "RouteChange", True),
        "delete": _op("Delete a route added through the API, and its state (no live workers)",
                      {"200": "deleted|RouteDeleted"}, (404, 409), None, True),
    },
    "/routes/{route}/pause": {"post": _op("Pause a route: its partitions are released", {"200": "route|Route"},
                                          (404,), None, True)},
    "/routes/{route}/resume": {"post": _op("Resume a paused route", {"200": "route|Route"}, (404,), None, True)},
}


def _scoped(op: dict[str, Any]) -> dict[str, Any]:
    """A route-scoped operation also answers 400 (several routes, none named) and 404 (unknown route)."""
    responses = dict(op["responses"])
    for code in ("400", "404"):
        responses.setdefault(code, {"description": "error", **_json("Error")})
    return {**op, "responses": responses}


def _all_paths() -> dict[str, dict[str, Any]]:
    paths: dict[str, dict[str, Any]] = {}
    for path, ops in PATHS.items():
        paths[path] = {m: _scoped(op) for m, op in ops.items()} if path in ROUTE_SCOPED else ops
    paths.update(ROUTES)
    for path in ROUTE_SCOPED:
        paths[f"/routes/{{route}}{path}"] = paths[path]
    return paths
# --- the operator's view (controller/status_api.py) ---
SCHEMAS["Status"] = _obj({
    "pipeline": _STR, "generated_at": _STR, "healthy": _BOOL, "problems": {"type": "array", "items": _STR},
    "zookeeper": _STR, "leader": _NSTR,
    "workers": {"type": "array", "items": {"type": "object"}},
    "partitions": {"type": "array", "items": {"type": "object"}},
    "withheld": {"type": ["array", "null"], "items": _STR},
    "unowned": {"type": "array", "items": _STR}, "stuck": {"type": "array", "items": _STR},
    "freshness": {"type": ["object", "null"]}, "group_sync": {"type": ["object", "null"]},
    "verification": {"type": ["object", "null"]}, "verification_configured": _BOOL,
    "auth_failures": {"type": "object", "additionalProperties": _STR},
    # Every route's own section (controller/status_api.evaluate_routes), by route id.
    "routes": {"type": "object", "additionalProperties": _obj({
        "healthy": _BOOL, "problems": {"type": "array", "items": _STR},
        "withheld": {"type": ["array", "null"], "items": _STR},
        "unowned": {"type": "array", "items": _STR}, "stuck": {"type": "array", "items": _STR},
        "group_sync": {"type": ["object", "null"]}, "verification": {"type": ["object", "null"]},
    }, required=["healthy", "problems"])},
})
_HTML = {"content": {"text/html": {"schema": {"type": "string"}}}}
PATHS["/status"] = {"get": _op("Is it healthy? Leader, workers, every partition's owner and lag (records and "
                               "seconds), freshness, group sync, last verification; problems that need a person",
                               {"200": "status|Status"})}
PATHS["/ui"] = {"get": {"summary": "The status as one self-refreshing HTML page",
                        "responses": {"200": {"description": "page", **_HTML}}}}
PATHS["/ui/verification"] = {"get": {"summary": "The newest verification report (HTML); ?route=<id>: that route's",
                                     "responses": {"200": {"description": "report", **_HTML},
                                                   "404": {"description": "no report", **_json("Error")}}}}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "ureplicator-py admin API", "version": "1"},
        "paths": _all_paths(),
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"adminToken": {"type": "http", "scheme": "bearer"}},
        },
    }
