"""The leader-cost benchmark's pure parts: its deployments pass the topology check; its section renders."""

from __future__ import annotations

import json
from pathlib import Path

from bench import leader_cost
from ureplicator.common import config


def test_the_benchmark_deployments_are_valid_meshes():
    for routes in (1, 2, 20):
        cfg = config.from_dict(leader_cost._config("p", "127.0.0.1:1", routes))
        assert len(cfg.routes) == routes
        assert len({(r.source, r.destination) for r in cfg.routes}) == routes


def test_the_section_renders_from_the_stored_results():
    results = Path(leader_cost.__file__).parent / "results" / "leader-cost-2026-11-25.json"
    entry = json.loads(results.read_text())[-1]
    text = leader_cost.render(entry)
    assert "| route view (TreeCache) |" in text and "reads / status refresh" in text
