"""The Dockerfile against the build context (no container engine here): what it copies, its user, its parts."""

from __future__ import annotations

import re

from devtools import pylock
from tests.unit.helm_chart import REPO, chart_values, dockerfile_stages, image_user
from ureplicator.verifier import connector

# --- the image ---------------------------------------------------------------------------------




def _dockerignore_allowed() -> set[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return {line[1:].rstrip("/") for line in lines if line.startswith("!")}


def test_dockerfile_copies_only_what_the_build_context_sends() -> None:
    allowed = _dockerignore_allowed()
    copies = [i for stage in dockerfile_stages().values() for i in stage
              if i.keyword == "COPY" and "--from=" not in i.args]
    assert copies
    for copy in copies:
        *sources, _destination = copy.args.split()
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            assert source.rstrip("/").split("/")[0] in allowed, f"COPY {source}: excluded by .dockerignore"


def test_images_run_ureplicator_as_the_charts_user() -> None:
    stages = dockerfile_stages()
    assert list(stages)[-1] == "runtime", "the default target (last stage) is the controller/worker image"
    args = dict(re.match(r"(\w+)=(\S+)", i.args).groups() for i in stages[""] if i.keyword == "ARG")  # type: ignore[union-attr]
    assert re.fullmatch(r"python:3\.\d+-slim-\w+", args["PYTHON_IMAGE"]), "pin the base image by tag"
    entrypoint = [i.args for i in stages["base"] if i.keyword == "ENTRYPOINT"]
    # The chart passes subcommands as args: the entrypoint must end with the CLI.
    assert entrypoint and entrypoint[-1].rstrip("]").rstrip().endswith('"ureplicator"')
    for name in ("runtime", "verifier"):
        users = [i.args for i in stages["base"] + stages[name] if i.keyword == "USER"]
        assert users[-1] == "10001:10001" == f"{image_user()}:{image_user()}"
    assert chart_values()["controller"]["podSecurityContext"]["runAsUser"] == image_user()


def test_verifier_image_puts_the_connector_where_the_verifier_looks() -> None:
    stages = dockerfile_stages()
    env = " ".join(i.args for i in stages["verifier"] if i.keyword == "ENV")
    jars = re.search(rf"{connector.JARS_ENV}=(\S+)", env).group(1)  # type: ignore[union-attr]
    copies = [i.args.split() for i in stages["verifier"] if i.keyword == "COPY" and "--from=jars" in i.args]
    assert [c[-1].rstrip("/") for c in copies] == [jars]
    assert any("openjdk-17-jre-headless" in i.args for i in stages["verifier"] if i.keyword == "RUN")


def test_only_the_verifier_image_carries_pyspark() -> None:
    stages = dockerfile_stages()
    venvs = {name: [i.args.split()[0] for i in stages[name] if i.keyword == "COPY" and "venv" in i.args]
             for name in ("runtime", "verifier")}
    assert venvs == {"runtime": ["--from=build"], "verifier": ["--from=build-verifier"]}
    installs = {name: " ".join(i.args for i in stages[name] if i.keyword == "RUN" and "pip install" in i.args)
                for name in ("build", "build-verifier")}
    # both install from the lock files (hashes required), and only the verifier's pins pyspark
    assert "--require-hashes --no-deps -r lock/image-runtime.txt" in installs["build"]
    assert "--require-hashes --no-deps -r lock/image-verifier.txt" in installs["build-verifier"]
    assert "--no-deps --no-build-isolation ." in installs["build"]  # the package resolves nothing of its own
    assert "pyspark" not in pylock.pins(REPO / "lock" / "image-runtime.txt")
    assert "pyspark" in pylock.pins(REPO / "lock" / "image-verifier.txt")
