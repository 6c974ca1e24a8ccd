"""The chart's verifier: the CronJob's arguments parse with the verifier's parser; the warm verifier."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.helm_chart import (
    CHART,
    CI_VALUES,
    CONFIG_PATH,
    KUBE_MIN,
    MINIMAL_VALUES,
    NAMESPACE,
    RELEASE,
    VALUES_FILES,
    VALUES_IDS,
    chart_values,
    container_port,
    dockerfile_stages,
    of_kind,
    one,
    pod_template,
    render,
    run_helm,
    values_of,
)

# --- the verifier CronJob ----------------------------------------------------------------------


def _verifier_parser() -> Any:
    import argparse

    from ureplicator.verifier import cli as verifier_cli

    parser = argparse.ArgumentParser(prog="ureplicator verify")
    verifier_cli.add_arguments(parser)
    return parser


def verifier_workload(docs: list[dict[str, Any]], values: Path | None) -> dict[str, Any]:
    """The verifier's CronJob, or with verifier.mode warm its Deployment; the other kind is absent."""
    warm = values_of(values)["verifier"]["mode"] == "warm"
    kind, other = ("Deployment", "CronJob") if warm else ("CronJob", "Deployment")
    labels = [d["metadata"]["labels"] for d in of_kind(docs, other)]
    assert not [d for d in labels if d.get("app.kubernetes.io/component") == "verifier"]
    return one(docs, kind, "verifier")


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_verifier_arguments_parse_with_the_verifier_cli(helm: Path, values: Path | None) -> None:
    from ureplicator.verifier import cli as verifier_cli

    docs = render(helm, values)
    workload = verifier_workload(docs, values)
    spec = pod_template(workload)["spec"]
    (container,) = spec["containers"]
    assert container["args"][0] == "verify"
    args = _verifier_parser().parse_args(container["args"][1:])
    verifier = values_of(values)["verifier"]
    spark = verifier["spark"]
    if workload["kind"] == "CronJob":
        assert args.every is None and spec["restartPolicy"] == "Never"
    else:
        # The warm verifier: one driver, a pass every warm.every, restarted by its Deployment.
        assert args.every == verifier_cli.parse_interval(str(verifier["warm"]["every"]))
        assert spec.get("restartPolicy", "Always") == "Always"

    assert args.config == CONFIG_PATH
    assert args.output == Path("/reports")
    assert args.master == spark["master"]
    conf = dict(args.conf)
    for key, value in spark["conf"].items():
        assert conf[key] == str(value)
    scratch = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "spark-scratch"]
    assert conf["spark.local.dir"] in scratch
    assert "/reports" in {m["mountPath"] for m in container["volumeMounts"]}
    if spark["master"].startswith("local"):
        assert "ports" not in container and "spark.driver.port" not in conf
    else:
        assert int(conf["spark.driver.port"]) == container_port(container, "spark-driver")
        assert int(conf["spark.blockManager.port"]) == container_port(container, "spark-blockmgr")


def test_verifier_extra_args_follow_the_chart_arguments(helm: Path) -> None:
    done = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_MIN, "-f", str(MINIMAL_VALUES),
                     "--set-json", 'verifier.extraArgs=["--topic","orders","--bucket-size","5000"]',
                     "--set-json", 'verifier.spark.conf={"spark.sql.shuffle.partitions":1000000}')
    assert done.returncode == 0, done.stderr
    cron = one([d for d in yaml.safe_load_all(done.stdout) if d], "CronJob", "verifier")
    args = _verifier_parser().parse_args(pod_template(cron)["spec"]["containers"][0]["args"][1:])
    assert args.topic == ["orders"] and args.bucket_size == 5000
    # A whole number stays whole: Go would print 1e+06, which Spark cannot parse.
    assert dict(args.conf)["spark.sql.shuffle.partitions"] == "1000000"


def test_disabled_verifier_renders_nothing_of_it(helm: Path) -> None:
    done = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_MIN, "-f", str(MINIMAL_VALUES),
                     "--set", "verifier.enabled=false")
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert not [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "verifier"]



# --- the warm verifier (verifier.mode warm, issue 28) --------------------------------------------

WARM_VALUES = CHART / "ci" / "warm-verifier-values.yaml"


def _render_with(helm: Path, *args: str) -> list[dict[str, Any]]:
    done = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_MIN,
                     *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_warm_verifier_is_one_recreated_pod_that_outlives_a_pass_on_the_reports_claim(helm: Path) -> None:
    # Given the warm verifier's values
    docs = render(helm, WARM_VALUES)
    warm = values_of(WARM_VALUES)["verifier"]["warm"]
    # Then it is a Deployment of one pod, and no CronJob shares its checkpoint
    deployment = verifier_workload(docs, WARM_VALUES)
    assert deployment["kind"] == "Deployment" and deployment["spec"]["replicas"] == 1
    # And the old pod is gone before the new one starts (the checkpoint's lock admits one verifier)
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = pod_template(deployment)["spec"]
    # And the first SIGTERM has the configured time to finish the running pass
    assert spec["terminationGracePeriodSeconds"] == warm["terminationGracePeriodSeconds"]
    # And /reports (where the checkpoint lives) is the claim the chart creates
    (container,) = spec["containers"]
    claim = one(docs, "PersistentVolumeClaim", "verifier")["metadata"]["name"]
    reports = next(v for v in spec["volumes"] if v["name"] == "reports")
    assert reports["persistentVolumeClaim"]["claimName"] == claim
    assert {"name": "reports", "mountPath": "/reports"} in container["volumeMounts"]
    args = _verifier_parser().parse_args(container["args"][1:])
    assert args.checkpoint is None and args.output == Path("/reports")  # default: /reports/checkpoint.json
    assert args.full_every == 7 * 86400  # extraArgs follow the chart's
    # And the Deployment's selector picks its pods only
    assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "verifier"


def test_warm_verifier_runs_the_cronjobs_container_and_volumes_but_for_every_and_the_probe(helm: Path) -> None:
    # Given the same values rendered as a CronJob and as the warm verifier
    extra = ["-f", str(CHART / "ci" / "external-spark-values.yaml"), "--set", "verifier.warm.every=1h30m"]
    cron = pod_template(one(_render_with(helm, *extra), "CronJob", "verifier"))["spec"]
    warm_docs = _render_with(helm, *extra, "--set", "verifier.mode=warm")
    warm = pod_template(one(warm_docs, "Deployment", "verifier"))["spec"]
    (cron_container,), (warm_container,) = cron["containers"], warm["containers"]
    # Then the warm container is the CronJob's with `--every` after `verify` and a liveness probe
    assert warm_container["args"][:3] == ["verify", "--every", "1h30m"]
    assert warm_container["args"][3:] == cron_container["args"][1:]
    assert "livenessProbe" in warm_container
    assert {k: v for k, v in warm_container.items() if k not in ("args", "livenessProbe")} == \
        {k: v for k, v in cron_container.items() if k != "args"}
    # And the pod has the same volumes, security context and service account
    assert warm["volumes"] == cron["volumes"]
    for key in ("securityContext", "serviceAccountName", "automountServiceAccountToken"):
        assert warm[key] == cron[key]


def test_default_values_render_the_cronjob_and_no_verifier_deployment(helm: Path) -> None:
    for values in [v for v in CI_VALUES if v != WARM_VALUES]:
        docs = render(helm, values)
        assert values_of(values)["verifier"]["mode"] == "cronjob"
        assert not [d for d in of_kind(docs, "Deployment")
                    if d["metadata"]["labels"]["app.kubernetes.io/component"] == "verifier"]
        one(docs, "CronJob", "verifier")
    assert chart_values()["verifier"]["mode"] == "cronjob"


def test_warm_verifier_without_a_probe_or_verifier_renders_none(helm: Path) -> None:
    docs = _render_with(helm, "-f", str(WARM_VALUES), "--set", "verifier.warm.livenessProbe.enabled=false")
    (container,) = pod_template(one(docs, "Deployment", "verifier"))["spec"]["containers"]
    assert "livenessProbe" not in container
    docs = _render_with(helm, "-f", str(WARM_VALUES), "--set", "verifier.enabled=false",
                        "--set", "controller.verificationReports.enabled=false")
    assert not [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "verifier"]


def _process_one_started_s_ago() -> float:
    import os

    ticks = int(Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()[19])
    return float(Path("/proc/uptime").read_text().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")


def test_warm_liveness_probe_fails_only_when_no_pass_ended_for_max_age(helm: Path, tmp_path: Path) -> None:
    import os
    import time

    from ureplicator.reports.store import HISTORY

    # Given the rendered probe command, run here against a history file of our own
    (container,) = pod_template(one(render(helm, WARM_VALUES), "Deployment", "verifier"))["spec"]["containers"]
    probe = container["livenessProbe"]
    command = probe["exec"]["command"]
    assert command[-2] == f"/reports/{HISTORY}"  # every pass appends to it, even one that could not run
    assert int(command[-1]) == values_of(WARM_VALUES)["verifier"]["warm"]["livenessProbe"]["maxAgeSeconds"]
    assert probe["failureThreshold"] == 1 and probe["timeoutSeconds"] >= 10
    # And its interpreter is the image's (the verifier stage builds on base, whose PATH starts at the venv)
    assert command[0] == "python"
    assert any(i.keyword == "ENV" and "PATH=/opt/ureplicator/venv/bin:" in i.args for i in dockerfile_stages()["base"])
    assert dockerfile_stages()["verifier"][0].args.split()[0] == "base"
    # The probe compares ages with the container's (process 1's) own; scale them to it.
    age = _process_one_started_s_ago()
    max_age = age / 2
    history = tmp_path / HISTORY

    def alive(max_age: float) -> bool:
        done = subprocess.run([sys.executable, *command[1:-2], str(history), str(max_age)], timeout=30)
        return done.returncode == 0

    # When no pass has ended yet and the container has run longer than max age: stuck
    assert not alive(max_age)
    # When a pass just ended: alive
    history.write_text("{}\n")
    assert alive(max_age)
    # When the last pass ended long before max age: stuck
    old = time.time() - max_age - 7200
    os.utime(history, (old, old))
    assert not alive(max_age)
    # Unless the container itself started less than max age ago (its first pass may be a full one)
    assert alive(age + 3600)


def test_warm_verifier_notes_show_its_log(helm: Path, tmp_path: Path) -> None:
    chart = tmp_path / "ureplicator"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "NOTES.txt").rename(chart / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n'
    )
    done = run_helm(helm, "template", RELEASE, str(chart), "--namespace", NAMESPACE, "--kube-version", KUBE_MIN,
                     "--show-only", "templates/zz-notes.yaml", "-f", str(WARM_VALUES))
    assert done.returncode == 0, done.stderr
    notes = yaml.safe_load(done.stdout)["data"]["notes"]
    name = one(render(helm, WARM_VALUES), "Deployment", "verifier")["metadata"]["name"]
    assert f"logs -f deployment/{name}" in notes and "cronjob/" not in notes
