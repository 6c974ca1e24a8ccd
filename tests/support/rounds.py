"""Wait for the leader's rounds, not for seconds: "N reconcile rounds later, nothing moved" is a real assertion."""

from __future__ import annotations

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

KINDS = {"reconcile": "ureplicator_controller_reconcile_rounds",
         "topic_sync": "ureplicator_controller_topic_sync_rounds",
         "pool": "ureplicator_controller_pool_rounds"}  # the shared pool's: one per deployment, no route


def gauge(url: str, name: str, route: str = "default") -> float | None:
    """The value of the controller's gauge ``name`` for ``route`` at ``url`` (None while it exports none)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == name:
            for sample in family.samples:
                if sample.labels.get("route") == route:
                    return float(sample.value)
    return None


def rounds(url: str, kind: str = "reconcile", route: str = "default") -> int:
    """Rounds of ``kind`` the controller at ``url`` completed for ``route`` as leader (0 while it does not lead).

    The pool's rounds belong to no route: ``route`` is ignored for ``kind="pool"``.
    """
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == KINDS[kind]:
            for sample in family.samples:
                if sample.name.endswith("_total") and (kind == "pool" or sample.labels.get("route") == route):
                    return int(sample.value)
    return 0


def wait_rounds(url: str, count: int, kind: str = "reconcile", route: str = "default",
                timeout_s: float = 60) -> None:
    """Return once the leader at ``url`` has completed ``count`` more rounds of ``kind`` for ``route``.

    Whatever the rounds would have changed, they have had their chance to change it: an
    assertion that nothing moved, made after this, cannot pass merely because the system
    had not acted yet.
    """
    start = rounds(url, kind, route)
    deadline = time.monotonic() + timeout_s
    while (done := rounds(url, kind, route) - start) < count:
        assert time.monotonic() < deadline, f"{done} of {count} {kind} rounds of route {route} in {timeout_s} s"
        time.sleep(0.1)
