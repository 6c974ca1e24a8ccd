"""Run one controller replica: ZooKeeper session, leader election, the REST API, until a signal.

The replica registers the config's routes, contends in the deployment's election and, while it
leads, reconciles every route on its own thread (:class:`controller.routeset.RouteSet`).
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from ureplicator.common import kafka, logs, signals, zk
from ureplicator.common.config import Config, check_rest_exposure, route_view
from ureplicator.controller import groups_api
from ureplicator.controller import heartbeat as heartbeat_module
from ureplicator.controller.api import Controller, create_app, route_of_request, serve
from ureplicator.controller.routeset import RouteSet, register_declared, registry
from ureplicator.controller.verification_api import make_blueprint, register_metrics


def run(config: Config) -> int:
    identifier = f"{socket.gethostname()}-{os.getpid()}"
    check_rest_exposure(config)  # before any connection: a refused start leaves nothing behind
    log = logs.get("controller", pipeline=config.pipeline, controller=identifier)
    log.info("controller_starting", config=config.redacted())
    config = route_view(config, route=config.routes[0])  # the bare paths' route when it is the only one
    client = zk.connect(config)
    try:
        register_declared(config, client)
    except BaseException:
        client.stop()
        client.close()
        raise
    admins: dict[str, object] = {}

    def admin_for(alias: str) -> object:
        # One AdminClient per cluster, shared by the routes that touch it.
        if alias not in admins:
            admins[alias] = kafka.admin(config.clusters[alias])
        return admins[alias]

    source_admin = admin_for(config.source.alias)
    destination_admin = admin_for(config.destination.alias)
    leadership = RouteSet(config, client, identifier, admins=admin_for)
    reports_dir = Path(config.controller.verification_dir) if config.controller.verification_dir else None
    register_metrics(leadership.metrics.registry, reports_dir, routes=lambda: registry(config, client))
    controller = Controller(
        config=config,
        zk=client,
        leadership=leadership,
        source_admin=source_admin,
        destination_admin=destination_admin,
        source_consumer=kafka.consumer(config.source, config.consumer_group, f"ureplicator-controller-{identifier}"),
        route_blueprints=[make_blueprint(reports_dir, lambda: route_of_request().config.route_id)],
        admins_for=admin_for,
        consumer_for=lambda view: kafka.consumer(view.source, view.consumer_group,
                                                 f"ureplicator-controller-{identifier}"),
    )
    groups = groups_api.start(config, client, leadership, controller.route_blueprints, admin_for)
    # --- freshness: the heartbeat through the pipeline (controller/heartbeat.py) ---
    heartbeat = heartbeat_module.start(config, client, leadership, admin_for)
    try:
        server = serve(create_app(controller), config.controller.rest_host, config.controller.rest_port,
                       timeout_s=int(config.controller.request_timeout_s))
    except OSError as exc:
        client.stop()
        client.close()
        log.error("rest_port_unavailable", port=config.controller.rest_port, error=logs.error_text(exc))
        return 1
    leadership.start()
    log.info("controller_started", rest_port=server.server_port)

    stop = threading.Event()
    signals.on_stop_signals(stop.set, log, "controller_stopping")
    stop.wait()
    server.shutdown()
    leadership.stop()
    heartbeat.stop()
    groups.stop()
    controller.source_consumer.close()
    client.stop()
    client.close()
    log.info("controller_stopped")
    return 0
