"""Client properties that would void a guarantee are refused, by the config and by ``ureplicator check`` alike.

``transactional.id`` (shared by every producer of the cluster), ``auto.offset.reset`` (overrides
``worker.auto_offset_reset``) and ``isolation.level`` other than ``read_committed`` (mirrors aborted
records) in any cluster's properties: a ConfigError naming the key and what to set instead. ``check``
reports the same error, and the pinned producer settings the worker refuses when it opens its clients.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ureplicator.cli import main as cli
from ureplicator.common import config as config_module
from ureplicator.common.errors import ConfigError

REFUSED = [
    ("transactional.id", "tx-1", "worker.exactly_once"),
    ("auto.offset.reset", "latest", "worker.auto_offset_reset"),
    ("isolation.level", "read_uncommitted", "read_committed"),
]


def _single(section: str = "", properties: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "pipeline": "unit", "zookeeper": {"connect": "127.0.0.1:1"},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
    }
    if section:
        doc[section]["properties"] = properties
    return doc


def _routes(alias: str, properties: dict[str, Any]) -> dict[str, Any]:
    clusters: dict[str, Any] = {"a": {"bootstrap_servers": "127.0.0.1:1"}, "b": {"bootstrap_servers": "127.0.0.1:2"}}
    clusters[alias]["properties"] = properties
    return {"pipeline": "unit", "zookeeper": {"connect": "127.0.0.1:1"}, "clusters": clusters,
            "routes": [{"id": "r1", "source": "a", "destination": "b"}]}


@pytest.mark.parametrize(("name", "value", "instead"), REFUSED)
@pytest.mark.parametrize("section", ["source", "destination"])
def test_a_guarantee_voiding_property_of_source_or_destination_is_a_config_error(section, name, value, instead):
    with pytest.raises(ConfigError) as err:
        config_module.from_dict(_single(section, {name: value}))
    assert err.value.key == f"{section}.properties.{name}"
    assert instead in str(err.value)


@pytest.mark.parametrize(("name", "value", "instead"), REFUSED)
@pytest.mark.parametrize("alias", ["a", "b"])
def test_the_same_properties_of_a_declared_cluster_are_refused(alias, name, value, instead):
    with pytest.raises(ConfigError) as err:
        config_module.from_dict(_routes(alias, {name: value}))
    assert err.value.key == f"clusters.{alias}.properties.{name}"
    assert instead in str(err.value)


def test_an_environment_variable_is_refused_like_the_file():
    env = {"UREPLICATOR_SOURCE_PROPERTIES_AUTO_OFFSET_RESET": "latest"}
    raw = _single()
    config_module._apply_env(raw, env)
    with pytest.raises(ConfigError) as err:
        config_module.from_dict(raw)
    assert err.value.key == "source.properties.auto.offset.reset"


def test_read_committed_the_workers_own_isolation_level_may_be_written_out():
    cfg = config_module.from_dict(_single("source", {"isolation.level": "read_committed"}))
    assert cfg.source.properties["isolation.level"] == "read_committed"


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, doc: dict[str, Any],
         *extra: str) -> tuple[int, str]:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))
    status = cli.main([command, "--config", str(path), *extra])
    out = capsys.readouterr()
    return status, out.out + out.err


@pytest.mark.parametrize(("name", "value", "instead"), REFUSED)
def test_check_reports_the_refusal_the_worker_stops_with(tmp_path, capsys, name, value, instead):
    doc = _single("source" if name != "transactional.id" else "destination", {name: value})
    # The worker refuses to start: exit status 2 and the error naming the key
    worker_status, worker_out = _run(tmp_path, capsys, "worker", doc)
    key = f"{'destination' if name == 'transactional.id' else 'source'}.properties.{name}"
    assert worker_status == 2 and key in worker_out and instead in worker_out
    error = worker_out.strip().removeprefix("ureplicator: ")
    # And check says the same, before it tries any service
    check_status, check_out = _run(tmp_path, capsys, "check", doc, "--timeout", "0.1")
    assert check_status == 2
    assert check_out.splitlines()[0].split(None, 2) == ["FAIL", "config", error]
    check_status, check_json = _run(tmp_path, capsys, "check", doc, "--json", "--timeout", "0.1")
    assert check_status == 2 and json.loads(check_json)["findings"][0]["message"] == error


def test_check_reports_a_pinned_producer_setting_the_worker_refuses_when_it_opens_its_clients(tmp_path, capsys):
    # Given acks=1 on a route's destination: the config loads, the worker refuses when it opens its producer
    doc = _routes("b", {"acks": "1"})
    with pytest.raises(ConfigError) as err:
        from ureplicator.worker import clients
        clients.pins(config_module.load(_write(tmp_path, doc)))
    # When check runs, Then it reports that error, as a config error
    status, out = _run(tmp_path, capsys, "check", doc, "--timeout", "0.1")
    assert status == 2
    assert out.splitlines()[0].split(None, 2) == ["FAIL", "config", str(err.value)]


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "loaded.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
