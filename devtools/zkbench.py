"""Time the worker's status-node encode and the leader's decode, this checkout against another revision.

``python -m devtools.zkbench --against 38889fe`` loads ``common/zkschema.py`` of that revision
beside this checkout's and times both on the same status documents (1, 64 and 512
partitions), interleaved and best of 40, so a busy shared machine slows both alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from types import ModuleType

from ureplicator.common import zkschema

ROOT = Path(__file__).resolve().parents[1]


def _module_at(revision: str) -> ModuleType:
    text = subprocess.run(["git", "show", f"{revision}:common/zkschema.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "zkschema_then.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("zkschema_then", path)
    assert spec and spec.loader  # noqa: S101 - a file we just wrote
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _best(fn: object, number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.zkbench", description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="a git revision to compare with")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    modules = {"then": _module_at(args.against), "now": zkschema}
    for n in (1, 64, 512):
        docs = {name: m.WorkerStatus(7, {(f"topic-{i % 8}", i // 8): m.PartitionStatus(123456 + i, 1000.5, 2e6, 12,
                                                                                        None, 1.7e9)
                                         for i in range(n)}, "2026-11-25T20:00:00Z")
                for name, m in modules.items()}
        number = max(5, 2000 // n)
        best = {(name, op): float("inf") for name in modules for op in ("encode", "decode")}
        for _ in range(args.rounds):
            for name, m in modules.items():
                status = docs[name]
                data = status.encode()
                best[name, "encode"] = min(best[name, "encode"], _best(status.encode, number))
                best[name, "decode"] = min(best[name, "decode"], _best(lambda m=m, d=data: m.WorkerStatus.decode(d),
                                                                      number))
        print(f"{n:4d} partitions: encode {best['then', 'encode']:8.1f} -> {best['now', 'encode']:8.1f} us, "
              f"decode {best['then', 'decode']:8.1f} -> {best['now', 'decode']:8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
