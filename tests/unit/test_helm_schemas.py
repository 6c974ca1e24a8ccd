"""The pinned helm lints the chart, its objects pass the Kubernetes schemas, every process loads its config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import kubernetes_validate
import pytest

from devtools import helmtool, jvm
from tests.unit.helm_chart import (
    CHART,
    CONFIG_PATH,
    CUSTOM_KINDS,
    KUBE_MAX,
    KUBE_MIN,
    MINIMAL_VALUES,
    VALUES_FILES,
    VALUES_IDS,
    WORKER_KIND,
    assert_files_are_mounted,
    assert_secrets_arrive,
    config_text,
    container_port,
    of_kind,
    one,
    pod_environment,
    pod_template,
    render,
    rendered_config,
    run_helm,
    secret_value,
    values_of,
    workloads,
)
from ureplicator.common import config

# --- helm itself -------------------------------------------------------------------------------


def test_helm_is_the_pinned_build(helm: Path) -> None:
    assert helmtool.installed_version(helm) == helmtool.HELM_VERSION
    assert helm == jvm.CACHE_DIR / "bin" / "helm"


def test_helms_default_kubernetes_version_comes_from_its_client_go() -> None:
    go_mod = "module helm.sh/helm/v3\n\nrequire (\n\tk8s.io/api v0.36.2\n\tk8s.io/client-go v0.36.2\n)\n"
    assert helmtool.kube_version(go_mod) == ("1", "36")
    flags = helmtool.ldflags("v3.21.4", "1", "36")
    assert "-X helm.sh/helm/v3/internal/version.version=v3.21.4" in flags
    assert "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=36" in flags
    with pytest.raises(helmtool.HelmToolError):
        helmtool.kube_version("module x\n")


# --- lint and Kubernetes schemas ---------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_lint_is_clean_in_strict_mode(helm: Path, values: Path | None) -> None:
    args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_MIN]
    if values is not None:
        args += ["-f", str(values)]
    done = run_helm(helm, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("kube_version", [KUBE_MIN, KUBE_MAX])
@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_every_object_is_valid_kubernetes(helm: Path, values: Path | None, kube_version: str) -> None:
    docs = render(helm, values, kube_version)
    errors = []
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {where}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(exc.message)
    assert not errors, "\n".join(errors)
    kinds = {d["kind"] for d in docs}
    assert {"ConfigMap", "Deployment", "Service"} <= kinds


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_every_volume_has_one_source_and_every_mount_a_volume(helm: Path, values: Path | None) -> None:
    # The schemas allow `emptyDir: null`, which the API server rejects as a volume without source.
    docs = render(helm, values)
    config_maps = {d["metadata"]["name"] for d in of_kind(docs, "ConfigMap")}
    claims = {d["metadata"]["name"] for d in of_kind(docs, "PersistentVolumeClaim")}
    v = values_of(values)
    existing_claim = v["verifier"]["reports"]["persistence"]["existingClaim"]
    for workload in workloads(docs):
        spec = pod_template(workload)["spec"]
        component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        users = {vol["name"] for vol in v[component]["extraVolumes"]}  # the user's own references
        volumes = {}
        for volume in spec["volumes"]:
            sources = {key: source for key, source in volume.items() if key != "name"}
            assert len(sources) == 1 and isinstance(next(iter(sources.values())), dict), volume
            volumes[volume["name"]] = sources
        for container in spec["containers"]:
            for mount in container["volumeMounts"]:
                assert mount["name"] in volumes, f"{container['name']} mounts unknown {mount['name']}"
        for name, sources in volumes.items():
            if name in users:
                continue
            if "configMap" in sources:
                assert sources["configMap"]["name"] in config_maps
            if "persistentVolumeClaim" in sources:
                assert sources["persistentVolumeClaim"]["claimName"] in claims | {existing_claim}


# --- the config file, as each process loads it ---------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_every_process_loads_the_rendered_config(helm: Path, values: Path | None, tmp_path: Path) -> None:
    docs = render(helm, values)
    path = tmp_path / "config.yaml"
    path.write_text(config_text(docs))
    v = values_of(values)
    for workload in workloads(docs):
        spec = pod_template(workload)["spec"]
        mounts_by_volume = {vol["name"]: vol for vol in spec["volumes"]}
        for container in spec["containers"]:
            assert CONFIG_PATH in container["args"], "every process must get the mounted config"
            env = pod_environment(container, pod_name="mirror-worker-7d9f-abcde")
            cfg = config.load(path, env=env)

            assert cfg.pipeline == v["pipeline"]
            assert cfg.zookeeper.connect == v["zookeeper"]["connect"]
            for section, key in (("source", "sourceCluster"), ("destination", "targetCluster")):
                cluster = v["clusters"][v[key]]
                loaded = getattr(cfg, section)
                assert loaded.alias == cluster.get("alias", v[key])
                assert loaded.bootstrap_servers == cluster["bootstrapServers"]
                assert_secrets_arrive(cluster, loaded.properties)
                assert_files_are_mounted(loaded.properties, container, mounts_by_volume)

            component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
            zk_auth = v.get("zookeeperAuth", {})
            expected_auth = (secret_value(zk_auth["existingSecret"], zk_auth["key"])
                             if zk_auth.get("existingSecret") else None)
            assert cfg.zookeeper.auth == expected_auth
            if component == "controller":
                assert cfg.controller.rest_port == container_port(container, "http")
                token = v["controller"]["adminToken"]
                expected = secret_value(token["existingSecret"], token["key"]) if token["existingSecret"] else None
                assert cfg.controller.admin_token == expected
                config.check_rest_exposure(cfg)  # the controller starts instead of refusing
            if component == "worker":
                # UREPLICATOR_WORKER_ID from metadata.name: the pod name is the worker id.
                assert config.worker_id(cfg) == "mirror-worker-7d9f-abcde"
                assert cfg.worker.metrics_port == container_port(container, "metrics")
                for key, value in v["worker"]["config"].items():
                    assert getattr(cfg.worker, key) == value


def test_chart_config_keys_are_exactly_the_loaders() -> None:
    """Each values `config` block offers every key of its config section and nothing else,
    except the keys the chart sets itself."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    chart_set = {
        # ports, Secret, reports mount, controller.tls Secret
        "controller": {"rest_port", "admin_token", "verification_dir", "rest_tls_certfile", "rest_tls_keyfile"},
        "worker": {"id", "metrics_port", "route"},  # pod name, containerPorts.metrics, the pool's route
    }
    loader = {"controller": config.ControllerConfig, "worker": config.WorkerConfig}
    for component, section in loader.items():
        offered = set(schema[component]["properties"]["config"]["properties"])
        fields = {f.name for f in dataclasses.fields(section)}
        assert offered <= fields, f"{component}.config offers keys the loader rejects: {offered - fields}"
        missing = fields - offered - chart_set[component]
        assert not missing, f"add {sorted(missing)} to {component}.config in values.schema.json and values.yaml"
        assert set(values_of(None)[component]["config"]) <= offered
    zookeeper = {f.name for f in dataclasses.fields(config.ZooKeeperConfig)} - {"auth"}  # zookeeperAuth Secret
    assert set(schema["zookeeper"]["properties"]) == zookeeper


def test_controllers_serve_the_verifiers_reports_from_its_claim(helm: Path) -> None:
    docs = render(helm, CHART / "ci" / "auto-whitelist-values.yaml")
    spec = pod_template(one(docs, "Deployment", "controller"))["spec"]
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "reports"]
    assert mount["readOnly"] is True
    assert rendered_config(docs)["controller"]["verification_dir"] == mount["mountPath"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "reports"]
    cron_volumes = pod_template(one(docs, "CronJob", "verifier"))["spec"]["volumes"]
    (written,) = [v for v in cron_volumes if v["name"] == "reports"]
    assert volume["persistentVolumeClaim"]["claimName"] == written["persistentVolumeClaim"]["claimName"]
    assert one(docs, "PersistentVolumeClaim", "verifier")["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "verification_dir" not in rendered_config(render(helm, MINIMAL_VALUES))["controller"]






def test_tls_files_come_from_the_named_secret_keys(helm: Path) -> None:
    values = CHART / "ci" / "all-options-values.yaml"
    docs = render(helm, values)
    source = rendered_config(docs)["source"]["properties"]
    assert source["ssl.ca.location"] == "/etc/ureplicator/tls/source/ca/bundle.pem"
    assert source["ssl.certificate.location"] == "/etc/ureplicator/tls/source/client/user.crt"
    assert source["ssl.key.location"] == "/etc/ureplicator/tls/source/client/user.key"
    assert source["security.protocol"] == "SSL"
    volumes = {v["name"]: v for v in pod_template(one(docs, WORKER_KIND, "worker"))["spec"]["volumes"]}
    assert volumes["tls-source-ca"]["secret"]["secretName"] == "primary-ca"
    assert volumes["tls-source-client"]["secret"]["secretName"] == "primary-client"
