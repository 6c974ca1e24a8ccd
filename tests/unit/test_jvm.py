"""Unit tests for the pure parts of common/jvm.py: pom digest, stamp, classpath, java lookup."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from devtools import jvm


def _poms(root: Path, kafka_version: str = "3.9.1") -> Path:
    (root / "kafka").mkdir(parents=True, exist_ok=True)
    (root / "pom.xml").write_text("<project><modules><module>kafka</module></modules></project>")
    pom = f"<project><version>{kafka_version}</version></project>"
    (root / "kafka" / "pom.xml").write_text(pom)
    return root


def _fill(dest: Path, jars_per_component: int = 2) -> None:
    for component in jvm.COMPONENTS:
        (dest / component).mkdir(parents=True, exist_ok=True)
        for i in range(jars_per_component):
            (dest / component / f"{component}-lib-{i}.jar").write_bytes(b"PK")


def test_components_are_the_four_modules_of_the_pom() -> None:
    assert jvm.COMPONENTS == ("kafka", "zookeeper", "mirrormaker", "spark-kafka")
    for component in jvm.COMPONENTS:
        assert (jvm.POM_DIR / component / "pom.xml").is_file()
    assert jvm.REPO_ROOT == Path(jvm.__file__).resolve().parent.parent


def test_pom_digest_is_stable_and_changes_with_any_pom(tmp_path: Path) -> None:
    root = _poms(tmp_path / "jvm")
    first = jvm.pom_digest(root)
    assert first == jvm.pom_digest(root)
    _poms(root, kafka_version="3.9.2")
    assert jvm.pom_digest(root) != first


def test_pom_digest_includes_the_path(tmp_path: Path) -> None:
    # Moving a module (same content, other folder) must also invalidate the cache.
    a = _poms(tmp_path / "a")
    b = _poms(tmp_path / "b")
    (b / "kafka").rename(b / "kafka2")
    assert jvm.pom_digest(a) != jvm.pom_digest(b)


def test_pom_digest_of_the_real_poms() -> None:
    assert len(jvm.pom_digest()) == 64


def test_pom_digest_without_poms_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(jvm.JvmError, match="no pom.xml"):
        jvm.pom_digest(tmp_path)


def test_stamp_round_trip_and_is_current(tmp_path: Path) -> None:
    dest = tmp_path / "jvm"
    dest.mkdir()
    assert jvm.read_stamp(dest) is None
    assert not jvm.is_current(dest, "abc")
    _fill(dest)
    assert not jvm.is_current(dest, "abc"), "jars without a stamp are not trusted"
    jvm.write_stamp(dest, "abc")
    assert jvm.read_stamp(dest) == "abc"
    assert jvm.is_current(dest, "abc")
    assert not jvm.is_current(dest, "other"), "a changed pom invalidates the cache"


def test_is_current_needs_every_component(tmp_path: Path) -> None:
    dest = tmp_path / "jvm"
    _fill(dest)
    jvm.write_stamp(dest, "abc")
    for jar in (dest / "spark-kafka").glob("*.jar"):
        jar.unlink()
    assert jvm.jar_counts(dest)["spark-kafka"] == 0
    assert not jvm.is_current(dest, "abc")


def test_fetch_reuses_a_current_cache_without_maven(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(jvm, "CACHE_DIR", tmp_path)
    _fill(tmp_path / "jvm", jars_per_component=3)
    jvm.write_stamp(tmp_path / "jvm", jvm.pom_digest())
    # Maven must not even be looked up when the cache is current.
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert jvm.fetch() == list(jvm.COMPONENTS)
    err = capsys.readouterr().err
    assert "reused 4 components" in err
    assert "pom unchanged" in err
    assert "kafka 3 jars" in err and "spark-kafka 3 jars" in err


def test_fetch_without_maven_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(jvm, "CACHE_DIR", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(jvm.JvmError, match="`mvn` is not on PATH"):
        jvm.fetch()
    assert not (tmp_path / "jvm" / jvm.STAMP_NAME).exists()


def test_classpath_lists_the_jars(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(jvm, "CACHE_DIR", tmp_path)
    _fill(tmp_path / "jvm")
    (tmp_path / "jvm" / "kafka" / "notes.txt").write_text("not a jar")
    parts = jvm.classpath("kafka").split(os.pathsep)
    assert [Path(p).name for p in parts] == ["kafka-lib-0.jar", "kafka-lib-1.jar"]
    assert all(Path(p).is_absolute() for p in parts)


def test_classpath_when_missing_tells_to_run_make_install(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(jvm, "CACHE_DIR", tmp_path)
    with pytest.raises(jvm.JvmError, match="make install") as info:
        jvm.classpath("zookeeper")
    assert "zookeeper" in str(info.value)


def test_classpath_of_unknown_component(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(jvm, "CACHE_DIR", tmp_path)
    with pytest.raises(jvm.JvmError, match="unknown JVM component"):
        jvm.classpath("hadoop")


def _fake_java(folder: Path) -> Path:
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\nexit 0\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return java


def test_java_executable_prefers_java_home(tmp_path, monkeypatch) -> None:
    java = _fake_java(tmp_path / "jdk")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert jvm.java_executable() == str(java)


def test_java_executable_with_a_broken_java_home(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nothing-here"))
    with pytest.raises(jvm.JvmError, match="JAVA_HOME=.*no executable bin/java"):
        jvm.java_executable()


def test_java_executable_from_path_or_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    java = _fake_java(tmp_path / "jre")
    monkeypatch.setenv("PATH", str(java.parent))
    assert jvm.java_executable() == str(java)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(jvm.JvmError, match="Java not found"):
        jvm.java_executable()


def test_maven_command_targets_the_cache_folder(tmp_path: Path) -> None:
    cmd = jvm.maven_command("mvn", tmp_path / "out")
    assert cmd[0] == "mvn"
    assert "-B" in cmd
    assert f"-DcacheDir={tmp_path / 'out'}" in cmd
    assert cmd[-1] == "dependency:copy-dependencies"
    assert cmd[cmd.index("-f") + 1] == str(jvm.POM_DIR / "pom.xml")


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            "[INFO] Building ureplicator-jvm-kafka 0.1.0                         [2/5]",
            "resolving kafka [2/5]",
        ),
        (
            "[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/org/apache/"
            "kafka/kafka_2.13/3.9.1/kafka_2.13-3.9.1.jar (6.1 MB at 12 MB/s)",
            "  downloaded kafka_2.13-3.9.1.jar (6.1 MB at 12 MB/s)",
        ),
        ("[INFO] Downloaded from central: https://x/y/z-1.pom (3 kB at 1 MB/s)", None),
        ("[INFO] Downloading from central: https://x/y/z-1.jar", None),
        ("[ERROR] Failed to execute goal", "[ERROR] Failed to execute goal"),
        ("[ERROR] ", None),
    ],
)
def test_progress_lines(line: str, shown: str | None) -> None:
    assert jvm._progress(line) == shown


def test_cli_classpath_error_exits_1(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(jvm, "CACHE_DIR", tmp_path)
    assert jvm.main(["classpath", "kafka"]) == 1
    assert "make install" in capsys.readouterr().err
