"""The wheel: built from exactly what the image's build context sends, it installs one package, ``ureplicator``."""

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The source tree's runtime folders; the wheel holds them as ureplicator.<name>. devtools/, bench/
# and tests/ stay in the checkout.
RUNTIME = ("cli", "common", "controller", "failover", "reports", "worker", "verifier")
DATA_SUFFIXES = {".json", ".properties", ".yaml", ".yml", ".html", ".css", ".js"}


def _dockerignore_allowed() -> set[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return {line[1:].rstrip("/") for line in lines if line.startswith("!")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel` over a copy of the build context (symbolic links kept, as the image's COPY keeps them)."""
    tmp = tmp_path_factory.mktemp("wheel")
    context = tmp / "context"
    context.mkdir()
    for name in sorted(_dockerignore_allowed()):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, context / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "target"))
        else:
            shutil.copy2(source, context / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-q", "-w", str(tmp / "dist"), str(context)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = (tmp / "dist").glob("*.whl")
    return built


def test_the_wheel_has_one_top_level_package_and_every_data_file(wheel: Path) -> None:
    packaged = set(zipfile.ZipFile(wheel).namelist())
    data_files = {
        "ureplicator/" + path.relative_to(REPO).as_posix()
        for package in RUNTIME
        for path in (REPO / package).rglob("*")
        if path.is_file() and path.suffix in DATA_SUFFIXES and "__pycache__" not in path.parts
    }
    missing = sorted(data_files - packaged)
    assert not missing, f"not in the wheel (add them to setup.cfg [options.package_data]): {missing}"
    assert {name.split("/")[0] for name in packaged if ".dist-info/" not in name} == {"ureplicator"}
    assert {name.split("/")[1] for name in packaged if name.count("/") >= 2 and ".dist-info/" not in name} \
        == set(RUNTIME)
    (metadata,) = [name for name in packaged if name.endswith(".dist-info/METADATA")]
    requires = [line for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    spark = [line for line in requires if "pyspark" in line]
    assert spark and all('extra == "verifier"' in line for line in spark), "pyspark only with .[verifier]"


def test_the_wheel_installed_into_a_clean_venv_adds_only_ureplicator_and_runs(wheel: Path, tmp_path: Path) -> None:
    """Installed with --no-deps into a new venv; its dependencies come from this venv's site-packages,
    appended to the new one's path after the count (so nothing of this checkout is importable)."""
    clean = tmp_path / "clean"
    venv.EnvBuilder(with_pip=False).create(clean)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([clean / "bin" / "python", "-c", purelib],
                               capture_output=True, text=True, check=True).stdout.strip())
    before = set(os.listdir(site))
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(clean / "bin" / "python"), "install",
                           "--no-deps", "--no-index", "--disable-pip-version-check", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    added = {name for name in set(os.listdir(site)) - before if not name.endswith(".dist-info")}
    assert added == {"ureplicator"}

    # The dependencies (confluent-kafka, flask…) without this checkout's editable install: a bare
    # path entry, whose .pth files (the editable finder among them) Python does not run.
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    shown = subprocess.run([clean / "bin" / "ureplicator", "--help"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "usage: ureplicator" in shown.stdout
    where = subprocess.run([clean / "bin" / "python", "-c", "import ureplicator.worker.mirror as m; print(m.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(site / "ureplicator" / "worker")), where.stdout
