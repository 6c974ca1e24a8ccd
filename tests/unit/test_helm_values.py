"""Bad chart values fail with the schema's or the chart's message, and NOTES.txt shows commands the CLI accepts."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.helm_chart import (
    CHART,
    KUBE_MIN,
    MINIMAL_VALUES,
    NAMESPACE,
    RELEASE,
    VALUES_FILES,
    VALUES_IDS,
    config_text,
    one,
    pod_environment,
    pod_template,
    render,
    run_helm,
    values_of,
    worker_pools,
)
from ureplicator.cli import main as cli
from ureplicator.common import config

# --- bad values --------------------------------------------------------------------------------


BAD_VALUES = [
    ("negative-replicas", {"worker": {"replicas": -1}}, "at '/worker/replicas': minimum"),
    ("missing-source-cluster", {"sourceCluster": None}, "missing property 'sourceCluster'"),
    ("unknown-source-cluster", {"sourceCluster": "dc9"}, 'sourceCluster: "dc9" is not a key of clusters'),
    ("same-clusters", {"targetCluster": "source"}, "targetCluster: must differ from sourceCluster"),
    ("same-aliases", {"clusters": {"target": {"alias": "source"}}}, "they must differ"),
    ("unknown-config-key", {"worker": {"config": {"auto_whitelist": True}}},
     "at '/worker/config': additional properties 'auto_whitelist' not allowed"),
    ("chart-managed-config-key", {"worker": {"config": {"metrics_port": 9100}}},
     "additional properties 'metrics_port' not allowed"),
    ("typo-in-a-block", {"controller": {"replica": 3}}, "additional properties 'replica' not allowed"),
    ("bad-pipeline", {"pipeline": "dc1 to dc2"}, "at '/pipeline'"),
    ("bad-offset-reset", {"worker": {"config": {"auto_offset_reset": "newest"}}}, "auto_offset_reset"),
    ("short-grace-period", {"worker": {"terminationGracePeriodSeconds": 30}},
     "worker.terminationGracePeriodSeconds: 30 must be larger than worker.config.stop_timeout_s"),
    ("yarn-master", {"verifier": {"spark": {"master": "yarn"}}}, "at '/verifier/spark/master'"),
    ("password-in-properties", {"clusters": {"source": {"properties": {"sasl.password": "hunter2"}}}},
     "clusters.source.properties.sasl.password: looks like a secret"),
    ("sasl-without-secret", {"clusters": {"source": {"authentication": {"type": "scram-sha-512", "username": "u"}}}},
     "clusters.source.authentication.passwordSecret.secretName: required"),
    ("secret-property-with-uppercase", {"clusters": {"source": {"secretProperties": {
        "SSL_KEY_PASSWORD": {"secretName": "s", "key": "k"}}}}}, "SSL_KEY_PASSWORD"),
    ("both-pdb-bounds", {"worker": {"pdb": {"minAvailable": 1}}},
     "worker.pdb: set minAvailable or maxUnavailable, not both"),
    ("zero-metrics-port", {"worker": {"containerPorts": {"metrics": 0}}}, "at '/worker/containerPorts/metrics'"),
    ("reports-on-a-single-node-claim", {"controller": {"verificationReports": {"enabled": True}}},
     "set verifier.reports.persistence.accessModes to [ReadWriteMany]"),
    ("bad-topic-naming", {"controller": {"config": {"topic_naming": "suffix"}}},
     "at '/controller/config/topic_naming'"),
    ("no-admin-token", {"controller": {"adminToken": {"existingSecret": ""}}},
     "controller.adminToken.existingSecret: required, or anyone who reaches the REST port can add and remove"),
    ("zookeeper-auth-without-key", {"zookeeperAuth": {"existingSecret": "zk", "key": ""}},
     "at '/zookeeperAuth/key'"),
    ("unknown-verifier-mode", {"verifier": {"mode": "daemon"}}, "at '/verifier/mode'"),
    ("every-in-words", {"verifier": {"mode": "warm", "warm": {"every": "10 minutes"}}}, "at '/verifier/warm/every'"),
    ("every-zero", {"verifier": {"mode": "warm", "warm": {"every": "0s"}}},
     "verifier.warm.every: 0s is not a positive duration"),
    ("warm-typo", {"verifier": {"warm": {"interval": "10m"}}}, "additional properties 'interval' not allowed"),
    ("no-grace-for-the-warm-verifier", {"verifier": {"warm": {"terminationGracePeriodSeconds": 0}}},
     "at '/verifier/warm/terminationGracePeriodSeconds'"),
    ("liveness-shorter-than-the-interval",
     {"verifier": {"mode": "warm", "warm": {"every": "6h", "livenessProbe": {"maxAgeSeconds": 3600}}}},
     "verifier.warm.livenessProbe.maxAgeSeconds: 3600 must be larger than verifier.warm.every (6h = 21600s)"),
]


@pytest.mark.parametrize(("bad", "message"), [(b, m) for _, b, m in BAD_VALUES], ids=[n for n, _, _ in BAD_VALUES])
def test_bad_values_fail_with_a_clear_message(helm: Path, tmp_path: Path, bad: dict[str, Any], message: str) -> None:
    values = tmp_path / "bad-values.yaml"
    values.write_text(yaml.safe_dump(bad))
    done = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_MIN,
                     "-f", str(MINIMAL_VALUES), "-f", str(values))
    assert done.returncode != 0, f"rendered despite {bad}"
    assert message in done.stderr, done.stderr


def test_chart_defaults_alone_refuse_an_open_rest_api(helm: Path) -> None:
    """`helm install` with no values fails and says which Secret to create, or how to opt out."""
    done = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_MIN)
    assert done.returncode != 0
    assert "controller.adminToken.existingSecret: required" in done.stderr, done.stderr
    assert "controller.config.allow_anonymous=true" in done.stderr


def test_allow_anonymous_is_an_explicit_opt_out_that_the_controller_accepts(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "anonymous-values.yaml"
    values.write_text(yaml.safe_dump({"controller": {"config": {"allow_anonymous": True}}}))
    docs = render(helm, values)
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(config_text(docs))
    container = pod_template(one(docs, "Deployment", "controller"))["spec"]["containers"][0]
    env = pod_environment(container, pod_name="mirror-controller-0")
    assert "UREPLICATOR_CONTROLLER_ADMIN_TOKEN" not in env and "UREPLICATOR_ZOOKEEPER_AUTH" not in env
    cfg = config.load(cfg_path, env=env)
    assert cfg.controller.allow_anonymous is True and cfg.controller.admin_token is None
    config.check_rest_exposure(cfg)


# --- NOTES.txt ---------------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_notes_show_commands_the_cli_accepts(helm: Path, values: Path | None, tmp_path: Path) -> None:
    # `helm template` leaves NOTES.txt out; render it through tpl in a copy of the chart.
    chart = tmp_path / "ureplicator"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "NOTES.txt").rename(chart / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n'
    )
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE, "--kube-version", KUBE_MIN,
            "--show-only", "templates/zz-notes.yaml"]
    done = run_helm(helm, *args, *(["-f", str(values)] if values else []))
    assert done.returncode == 0, done.stderr
    notes = yaml.safe_load(done.stdout)["data"]["notes"]

    commands = re.findall(r"ureplicator ((?:topics|status) [^'\n]*)", notes)
    assert len(commands) >= 3, notes
    for command in commands:
        command = command.replace('"$UREPLICATOR_CONTROLLER_ADMIN_TOKEN"', "t0ken-123")
        parsed = cli._parser().parse_args(shlex.split(command))
        assert parsed.url.endswith(f":{values_of(values)['controller']['containerPorts']['http']}")
    docs = render(helm, values)
    for kind, component in (("Deployment", "controller"), ("Service", "controller")):
        assert one(docs, kind, component)["metadata"]["name"] in notes
    # the rollout command names the workers' real kind (a StatefulSet by default), for each pool
    for pool in worker_pools(docs):
        assert f"rollout status statefulset/{pool['metadata']['name']}" in notes
