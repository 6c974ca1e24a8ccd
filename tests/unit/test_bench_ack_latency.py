"""bench.ack_latency: one client's output read into a row, rows paired per setting, the headline's reading."""

from __future__ import annotations

import argparse
import json
import sys

import pytest

from bench import ack_latency
from bench.harness import BenchError

ARGS = argparse.Namespace(duration=1.0, warmup=0.5)


def _fake_client(*lines: str, status: int = 0) -> list[str]:
    """A command that prints ``lines`` and exits ``status`` (the client programs' output contract)."""
    return [sys.executable, "-c", f"import sys; print({chr(10).join(lines)!r}); sys.exit({status})"]


def test_librdkafka_requests_come_from_its_statistics_per_broker() -> None:
    stats = {"brokers": {"a:1/1": {"req": {"Produce": 300, "Metadata": 9}}, "a:1/bootstrap": {"req": {}}}}
    line = {"reports": 10, "failed": 0, "produced_s": 2.0, "p50_ms": 1.5, "p90_ms": 2.0, "p99_ms": 3.0, "max_ms": 4.0}
    row = ack_latency.measure(_fake_client(json.dumps(line), json.dumps(stats)), "librdkafka", "b:1", "t",
                              20_000, 16, 0, ARGS)
    assert row["requests"] == 300 and row["requests_per_s"] == 150
    assert (row["client"], row["rate"], row["partitions"], row["linger_ms"], row["p50_ms"]) == \
        ("librdkafka", 20_000, 16, 0, 1.5)


def test_the_java_client_reports_its_own_request_count() -> None:
    line = {"reports": 10, "failed": 0, "produced_s": 4.0, "p50_ms": 0.5, "p90_ms": 1.0, "p99_ms": 2.0,
            "max_ms": 3.0, "requests": 100}
    row = ack_latency.measure(_fake_client(json.dumps(line)), "java", "b:1", "t", 50_000, 1, 1, ARGS)
    assert row["requests_per_s"] == 25 and row["p99_ms"] == 2.0


def test_a_client_that_fails_names_the_setting_and_its_error() -> None:
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('broker down'); sys.exit(1)"]
    with pytest.raises(BenchError, match=r"java at 20,000/s, 16 partitions, linger 0 exited 1: broker down"):
        ack_latency.measure(failing, "java", "b:1", "t", 20_000, 16, 0, ARGS)


def _row(client: str, partitions: int, linger: int, p50: float, p99: float = 5.0, rps: int = 1000) -> dict:
    return {"client": client, "rate": 20_000, "partitions": partitions, "linger_ms": linger, "p50_ms": p50,
            "p99_ms": p99, "requests_per_s": rps}


def test_render_pairs_the_clients_per_setting_with_medians_over_rounds() -> None:
    entry = {
        "date": "2026-11-29T12:00:00+00:00", "code": {"commit": "abc1234"}, "load_at_start": [0.1, 0.2, 0.3],
        "load_at_end": [1.0, 1.0, 1.0],
        "machine": {"cpu_model": "cpu", "cores": 2, "ram_bytes": 2**34, "python": "3.11", "java": "java 17",
                    "kafka_brokers": "3.9.1", "mirrormaker2": "3.9.1", "librdkafka": "2.16.0"},
        "setup": {"value_bytes": 100, "duration_s": 15, "warmup_s": 3, "rounds": 3, "producer": "acks=all"},
        "rows": [_row("librdkafka", 16, 0, p) for p in (1.0, 2.0, 9.0)] + [_row("java", 16, 0, p) for p in (0.5,) * 3]
        + [_row("librdkafka", 16, 1, 1.8), _row("java", 16, 1, 1.6), _row("librdkafka", 1, 0, 0.1),
           _row("java", 1, 0, 0.3), _row("librdkafka", 4, 0, 7.0)],  # 4 partitions: no Java run, no row
    }
    text = ack_latency.render(entry)
    assert "| 20,000/s | 16 | 0 ms | 2.00 ms | 5.00 ms | 0.50 ms | 5.00 ms | 1,000 | 1,000 |" in text
    assert "| 20,000/s | 4 |" not in text
    assert ("16 partitions, linger 0 ms: +1.50 to +1.50 ms; 16 partitions, linger 1 ms: +0.20 to +0.20 ms; "
            "1 partition, linger 0 ms: -0.20 to -0.20 ms.") in text


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        ack_latency.main(["--rates", "0", "--no-write"])
    assert exc.value.code == 2
    assert "must be positive" in capsys.readouterr().err
