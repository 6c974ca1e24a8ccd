"""How the digest reader's work is cut into Spark tasks, and when it is not used."""

from __future__ import annotations

from ureplicator.verifier import digest


def _tiling(chunks):
    """Per partition, the one range its chunks cover when they cover it exactly once (sorted chunks, each
    non-empty, each starting where the previous one ended); AssertionError on a gap or an overlap.
    The same check as comparing sets of offsets, without building half a million tuples."""
    spans: dict[int, tuple[int, int]] = {}
    for p, start, end in sorted(chunks):
        assert start < end, (p, start, end)
        if p in spans:
            assert start == spans[p][1], f"partition {p}: a gap or an overlap at {start}"
            spans[p] = (spans[p][0], end)
        else:
            spans[p] = (start, end)
    return spans


def test_the_tiling_check_finds_a_gap_and_an_overlap():
    assert _tiling([(0, 5, 10), (0, 0, 5)]) == {0: (0, 10)}
    for broken in ([(0, 0, 5), (0, 6, 10)], [(0, 0, 5), (0, 4, 10)], [(0, 0, 5), (0, 5, 5)]):
        try:
            _tiling(broken)
        except AssertionError:
            continue
        raise AssertionError(f"{broken} passed")


def test_ranges_are_cut_at_bucket_boundaries_into_enough_tasks_for_every_core():
    ranges = {0: (5, 400_005), 1: (0, 100_000), 2: (7, 7)}
    chunks = digest.chunks(ranges, 10_000, parallelism=4)
    # every offset once, nothing else; an empty range makes no task
    assert _tiling(chunks) == {0: (5, 400_005), 1: (0, 100_000)}
    assert all(p != 2 for p, _, _ in chunks)
    # cuts fall on bucket boundaries, so a bucket is read by one task; at least one task per core
    assert all(start % 10_000 == 0 for _, start, _ in chunks if start not in (5, 0))
    assert len(chunks) >= 4


def test_small_ranges_are_not_split():
    assert digest.chunks({0: (0, 60), 1: (10, 70)}, 16, parallelism=8) == [(0, 0, 60), (1, 10, 70)]


def test_the_fallback_is_forced_by_the_environment_without_asking_spark(monkeypatch):
    monkeypatch.setenv(digest.READER_ENV, "kafka")
    assert digest.available(object()) is False  # no Spark call is made: a plain object would fail one


def test_the_digest_module_never_invalidates_the_pinned_jar_cache(tmp_path):
    from devtools import jvm

    (tmp_path / "pom.xml").write_text("<project/>")
    (tmp_path / "digest").mkdir()
    before = jvm.pom_digest(tmp_path)
    (tmp_path / "digest" / "pom.xml").write_text("<project>changed</project>")
    assert jvm.pom_digest(tmp_path) == before


def test_the_digest_jar_is_found_beside_the_connector_first(tmp_path):
    from ureplicator.verifier import connector

    shipped = str(tmp_path / connector.DIGEST_JAR)
    assert connector.digest_jar([str(tmp_path / "kafka-clients.jar"), shipped]) == shipped


def test_chunk_order_rows_prove_order_across_gaps_and_refuse_a_step_back():
    from ureplicator.verifier.pass1 import _ascending

    # Given chunks in destination order (start, rising, first source offset, last source offset)
    gapped = [(0, True, 0, 97), (100, True, 120, 400), (200, True, 401, 405)]
    assert _ascending(gapped)  # gaps between source offsets are no disorder
    assert _ascending(list(reversed(gapped)))  # the rows' order does not matter, the chunk start does
    assert not _ascending([(0, True, 0, 97), (100, True, 97, 400)])  # a chunk starts at or below the last
    assert not _ascending([(0, True, 0, 97), (100, False, 120, 400)])  # a chunk fell back inside
    assert not _ascending(None) and not _ascending([])  # no proof (Spark's Kafka source gives none)


def _row(p, cls, bucket, n, high=None, low=None, xor=None, first=None, last=None, first_do=None,
         delta_min=None, delta_max=None):
    return digest.BucketRow(p, cls, bucket, n, high, low, xor, first, last, first_do, delta_min, delta_max)


def test_rows_of_one_bucket_read_by_two_chunks_merge_like_sqls_aggregates():
    # Given the rows of two chunks that both read bucket 3 of partition 0, and one of another bucket
    a = _row(0, 0, 3, 5, high=2**40, low=7, xor=-6, first=30, last=34, first_do=100, delta_min=70, delta_max=70)
    b = _row(0, 0, 3, 2, high=2**40, low=None, xor=3, first=35, last=36, first_do=90, delta_min=55, delta_max=72)
    other = _row(1, 0, 3, 1, high=1, low=1, xor=1)
    # When they are merged
    merged = digest.merge([b, other, a])
    # Then counts and sums add (exactly, beyond 64 bits), xors xor, bounds take the extreme; a value one chunk
    # lacks is ignored and the rows come out in key order
    assert merged == [
        _row(0, 0, 3, 7, high=2**41, low=7, xor=-6 ^ 3, first=30, last=36, first_do=90, delta_min=55, delta_max=72),
        other,
    ]


def test_merging_keeps_classes_and_each_chunks_order_row_apart():
    rows = [_row(0, 6, 0, 0, xor=1, first=0, last=9), _row(0, 6, 10, 0, xor=0, first=10, last=19),
            _row(0, 1, -1, 4, first=20, last=23)]
    assert digest.merge(rows) == sorted(rows, key=lambda r: (r.p, r.cls, r.bucket))


def test_small_chunks_share_a_task_of_distinct_partitions_and_large_ones_keep_their_own():
    # Given 40 partitions of 1,000 offsets, and one of 200,000 that starts and ends off a chunk boundary
    ranges = {p: (0, 1_000) for p in range(40)}
    ranges[40] = (5, 200_005)
    # When they are cut into tasks for 2 cores
    found = digest.tasks(ranges, 1_000, parallelism=2)
    # Then every offset is read once, in the same chunks as before
    assert sorted(c for task in found for c in task) == sorted(digest.chunks(ranges, 1_000, parallelism=2))
    size = max(e - s for task in found for _, s, e in task)
    for task in found:
        # a full-size chunk alone; small ones packed up to that size, never two of one partition in a task
        assert len(task) == 1 or sum(e - s for _, s, e in task) <= size
        assert len({p for p, _, _ in task}) == len(task)
    # and the 40 small partitions are a few tasks, not 40
    assert len([task for task in found if task[0][0] < 40]) <= 2
