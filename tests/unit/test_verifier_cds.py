"""The verify command's own class archive: where it lives, when it is mapped, dumped, moved into place or dropped."""

from __future__ import annotations

import os
import time

from ureplicator.verifier import cds

COMPLETE = bytes.fromhex("a8ab0bf0") + b"rest of the archive"


def test_without_an_archive_the_run_dumps_one_beside_where_the_next_run_looks(tmp_path):
    target = tmp_path / "ureplicator" / "spark-k.jsa"
    options = cds.auto_options(target)
    assert options[0] == f"-XX:ArchiveClassesAtExit={target}.{os.getpid()}.part"
    assert target.parent.is_dir()


def test_a_finished_dump_is_moved_into_place_and_mapped_and_older_archives_go(tmp_path):
    # Given a finished dump of this classpath's archive and an archive of another install
    target = tmp_path / "spark-new.jsa"
    (tmp_path / "spark-new.jsa.123.part").write_bytes(COMPLETE)
    (tmp_path / "spark-old.jsa").write_bytes(COMPLETE)
    # When the next run starts
    options = cds.auto_options(target)
    # Then it maps the dump, now in place, and the other install's archive is removed
    assert options[:2] == [f"-XX:SharedArchiveFile={target}", "-Xshare:auto"]
    assert target.read_bytes() == COMPLETE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark-new.jsa"]


def test_a_dump_without_its_header_is_never_used_and_dropped_once_stale(tmp_path):
    # Given a dump still being written (or cut short): the JVM writes the header last
    target = tmp_path / "spark-k.jsa"
    part = tmp_path / "spark-k.jsa.99.part"
    part.write_bytes(bytes(64))
    # When a run starts: it does not map it, and dumps its own
    assert cds.auto_options(target)[0].startswith("-XX:ArchiveClassesAtExit=")
    assert part.exists() and not target.exists()
    # When the unfinished dump is older than any dump takes, it is removed
    old = time.time() - 3600
    os.utime(part, (old, old))
    cds.auto_options(target)
    assert not part.exists()


def test_the_archive_name_changes_with_the_classpath(tmp_path):
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"1")
    first = cds.auto_archive("java", [str(jar)], tmp_path)
    assert cds.auto_archive("java", [str(jar)], tmp_path) == first
    jar.write_bytes(b"22")
    assert cds.auto_archive("java", [str(jar)], tmp_path) != first


def test_off_maps_nothing_and_the_cache_follows_xdg(tmp_path):
    assert cds.archive({cds.CDS_ENV: cds.OFF}) is None
    assert cds.cache_folder({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "ureplicator"


def _verifier_stage() -> list[tuple[str, str]]:
    """(keyword, arguments) of the Dockerfile's verifier stage, continuation lines joined, comments dropped."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text().replace("\\\n", " ")
    stage: list[tuple[str, str]] | None = None
    for line in text.splitlines():
        keyword, _, args = line.strip().partition(" ")
        if not keyword or keyword.startswith("#"):
            continue
        if keyword == "FROM":
            if stage is not None:
                return stage
            stage = [] if args.endswith(" AS verifier") else None
        elif stage is not None:
            stage.append((keyword, args.strip()))
    assert stage is not None, "the Dockerfile has no verifier stage"
    return stage


def test_the_verifier_image_builds_its_class_archive_and_maps_it():
    stage = _verifier_stage()
    runs = [i for i, (keyword, args) in enumerate(stage) if keyword == "RUN" and "ureplicator.verifier.cds" in args]
    assert len(runs) == 1, "the verifier image should run python -m ureplicator.verifier.cds"
    archive = stage[runs[0]][1].split("ureplicator.verifier.cds", 1)[1].split()[0]
    envs = {i: args for i, (keyword, args) in enumerate(stage) if keyword == "ENV"}
    # the archive is what UREPLICATOR_SPARK_CDS names, so that the driver maps it
    assert any(f"{cds.CDS_ENV}={archive}" in args for args in envs.values())
    # and it is trained on the image's classpath: after the connector jars are in place, before the user switch
    jars = next(i for i, args in envs.items() if "UREPLICATOR_SPARK_JARS=" in args)
    user = max(i for i, (keyword, _) in enumerate(stage) if keyword == "USER")
    assert jars < runs[0] < user and stage[user][1] == "10001:10001"


def test_a_dump_is_complete_only_with_the_archive_header(tmp_path):
    done, cut = tmp_path / "done.jsa", tmp_path / "cut.jsa"
    done.write_bytes(COMPLETE)
    cut.write_bytes(b"\0" * 64)
    assert cds.complete(done) and not cds.complete(cut) and not cds.complete(tmp_path / "missing.jsa")
