"""The optional parts of the CLI: `verify` without pyspark, `stack`/`demo` without devtools, the jar lookup."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ureplicator.cli import main as cli
from ureplicator.verifier import connector


def test_verify_without_pyspark_exits_2_saying_how_to_install_it(monkeypatch, capsys, tmp_path):
    # Given an environment where pyspark cannot be imported (the controller/worker install)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    # When an operator runs `ureplicator verify`
    status = cli.main(["verify", "--config", str(tmp_path / "absent.yaml"), "--output", str(tmp_path / "r")])
    # Then it stops before touching anything, with the install command
    assert status == 2
    err = capsys.readouterr().err
    assert "ureplicator verify: pyspark is not installed: pip install 'ureplicator-py[verifier]'" in err
    assert not (tmp_path / "r").exists()


def test_stack_and_demo_outside_a_checkout_say_they_are_development_tools(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "devtools", None)
    for argv in (["stack", "status"], ["demo"]):
        assert cli.main(argv) == 1
        assert "is a development tool: run it from a source checkout" in capsys.readouterr().err


def test_connector_jars_come_from_the_environment_first(tmp_path):
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("b.jar", "a.jar", "notes.txt"):
        (jars / name).write_text("")
    assert connector.spark_jars({connector.JARS_ENV: str(jars)}) == [str(jars / "a.jar"), str(jars / "b.jar")]
    listed = f"{jars / 'b.jar'},{jars / 'a.jar'}"
    assert connector.spark_jars({connector.JARS_ENV: listed}) == [str(jars / "b.jar"), str(jars / "a.jar")]


def test_an_explicit_jars_setting_that_names_no_jar_is_an_error_not_a_fallback(tmp_path):
    cache = tmp_path / "cache"
    (cache / "jvm" / "spark-kafka").mkdir(parents=True)
    (cache / "jvm" / "spark-kafka" / "c.jar").write_text("")
    with pytest.raises(connector.ConnectorMissing, match="names no jar") as info:
        connector.spark_jars({connector.JARS_ENV: str(tmp_path / "nowhere"), "UREPLICATOR_CACHE": str(cache)})
    assert info.value.exit_status == 2


def test_connector_jars_fall_back_to_the_development_cache(tmp_path):
    cache = tmp_path / "cache"
    folder = cache / "jvm" / "spark-kafka"
    folder.mkdir(parents=True)
    (folder / "c.jar").write_text("")
    assert connector.spark_jars({"UREPLICATOR_CACHE": str(cache)}) == [str(folder / "c.jar")]


def test_missing_connector_jars_name_every_place_looked_and_the_fixes(tmp_path):
    with pytest.raises(connector.ConnectorMissing) as info:
        connector.spark_jars({"UREPLICATOR_CACHE": str(tmp_path / "empty")})
    message = str(info.value)
    assert connector.JARS_ENV in message and "spark.jars" in message and "make install" in message
    assert str(Path(sys.prefix) / "share" / "ureplicator" / "spark-kafka") in message
