"""The token bucket holds the long-run rate to the limit."""

from __future__ import annotations

import pytest

from ureplicator.worker.ratelimit import RateLimiter


def simulate(limiter: RateLimiter, batch: int, size: int, seconds: float) -> int:
    now, sent = 0.0, 0
    while now < seconds:
        wait = limiter.wait_s(now)
        if wait > 0:
            now += wait
            continue
        limiter.spend(batch, batch * size, now)
        sent += batch
        now += 0.001
    return sent


def test_unlimited_never_waits():
    limiter = RateLimiter()
    limiter.spend(10**6, 10**9, 0.0)
    assert limiter.wait_s(0.0) == 0.0


@pytest.mark.parametrize(("records_per_s", "bytes_per_s", "expected"), [(1000, 0, 1000), (0, 50_000, 500)])
def test_long_run_rate_matches_the_limit(records_per_s, bytes_per_s, expected):
    limiter = RateLimiter(records_per_s, bytes_per_s)
    sent = simulate(limiter, batch=50, size=100, seconds=20)
    # one second of burst is allowed on top of the rate
    assert expected * 20 <= sent <= expected * 21 + 50


def test_changing_the_limit_at_runtime_applies_at_once():
    limiter = RateLimiter(10_000, 0)
    limiter.spend(10_000, 0, 0.0)
    limiter.update(100, 0)
    limiter.spend(200, 0, 0.0)
    assert limiter.wait_s(0.0) == pytest.approx(2.0)
    assert limiter.max_batch(1000) == 100
