"""Controller scale benchmark: assignment time and ZooKeeper bytes written for 1k-100k partitions.

    .venv/bin/python -m bench.controller_scale [--quick] [--no-write]
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timezone

from bench.common import machine_info
from bench.recording import parser, run_and_record
from bench.render import section, table
from ureplicator.common.zkschema import Assignment
from ureplicator.controller.assignment import assign, moves

REPEAT = 3


def _timed(current: dict, workers: list[str], tps: list) -> tuple[float, dict]:
    """The median seconds of ``REPEAT`` runs of ``assign``, and its result."""
    times, result = [], {}
    for _ in range(REPEAT):
        start = time.perf_counter()
        result = assign(current, workers, tps)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def run(sizes: list[tuple[int, int]]) -> list[dict]:
    rows = []
    for partitions, workers in sizes:
        tps, topic = [], 0
        while len(tps) < partitions:  # realistic shape: topics of 8-64 partitions
            tps.extend((f"topic-{topic}", p) for p in range(8 * (1 + topic % 8)))
            topic += 1
        tps = tps[:partitions]
        names = [f"worker-{i:04d}" for i in range(workers)]
        fresh_s, fresh = _timed({}, names, tps)
        events = {"fresh": ({}, (fresh_s, fresh)), "join": (fresh, _timed(fresh, [*names, "worker-new"], tps)),
                  "leave": (fresh, _timed(fresh, names[1:], tps))}
        for event, (before, (seconds, after)) in events.items():
            changed = [w for w in after if after[w] != before.get(w, frozenset())]  # the nodes the leader rewrites
            size = sum(len(Assignment(1, after[w]).encode()) for w in changed)
            rows.append({"partitions": partitions, "workers": workers, "event": event, "seconds": round(seconds, 4),
                         "nodes_written": len(changed), "bytes_written": size,
                         "moved": moves(before, after) if before else 0})
            print(f"{partitions:>7} partitions {workers:>5} workers {event:<5} {seconds * 1000:9.1f} ms "
                  f"{len(changed):>5} nodes {size / 1024:9.1f} KiB moved {rows[-1]['moved']}", flush=True)
    return rows


def render(entry: dict) -> str:
    rows = [[f"{r['partitions']:,}", f"{r['workers']:,}", r["event"], f"{r['seconds'] * 1000:.1f} ms",
             f"{r['nodes_written']:,}", f"{r['bytes_written'] / 1024:,.1f} KiB", f"{r['moved']:,}"]
            for r in entry["rows"]]
    return section("## Controller scale",
                   f"`python -m bench.controller_scale` on {entry['machine']}, {entry['date']}. Median of {REPEAT} "
                   "runs of the pure assignment function; the columns are explained under Methods.",
                   table(["partitions", "workers", "event", "time", "nodes written", "bytes written", "moved"], rows,
                         "rrlrrrr"))


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.controller_scale", __doc__)
    cli.add_argument("--quick", action="store_true", help="only 1k and 10k partitions")
    args = cli.parse_args(argv)
    counts = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]

    def go() -> dict:
        m = machine_info()
        return {"machine": f"{m['cpu_model']}, {m['cores']} cores, Python {m['python']}", "quick": args.quick,
                "date": datetime.now(timezone.utc).date().isoformat(),
                "rows": run([(p, w) for p in counts for w in (10, 100, 1_000)])}

    return run_and_record(go, section="controller-scale", no_write=args.no_write)


if __name__ == "__main__":
    raise SystemExit(main())
