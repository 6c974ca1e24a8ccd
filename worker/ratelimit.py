"""A token bucket for records/s and bytes/s per worker (uReplicator's rate limiter), pure and clock-injected."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RateLimiter:
    """Allows bursts of one second's worth; ``wait_s`` says how long to hold off the next fetch."""

    records_per_s: int = 0  # 0 = unlimited
    bytes_per_s: int = 0
    _records: float = 0.0
    _bytes: float = 0.0
    _at: float | None = None

    def update(self, records_per_s: int, bytes_per_s: int) -> None:
        self.records_per_s, self.bytes_per_s = records_per_s, bytes_per_s
        self._records = min(self._records, float(records_per_s))
        self._bytes = min(self._bytes, float(bytes_per_s))

    @property
    def unlimited(self) -> bool:
        return not self.records_per_s and not self.bytes_per_s

    def _refill(self, now: float) -> None:
        if self._at is None:
            self._at = now
            self._records, self._bytes = float(self.records_per_s), float(self.bytes_per_s)
            return
        elapsed = max(0.0, now - self._at)
        self._at = now
        self._records = min(float(self.records_per_s), self._records + elapsed * self.records_per_s)
        self._bytes = min(float(self.bytes_per_s), self._bytes + elapsed * self.bytes_per_s)

    def spend(self, records: int, size: int, now: float) -> None:
        """Account for what was just fetched (the balance may go negative: it is paid back)."""
        if self.unlimited:
            return
        self._refill(now)
        self._records -= records
        self._bytes -= size

    def wait_s(self, now: float) -> float:
        if self.unlimited:
            return 0.0
        self._refill(now)
        waits = [0.0]
        if self.records_per_s and self._records < -1e-6:
            waits.append(-self._records / self.records_per_s)
        if self.bytes_per_s and self._bytes < -1e-6:
            waits.append(-self._bytes / self.bytes_per_s)
        return max(waits)

    def max_batch(self, default: int) -> int:
        """Fetch no more records per loop than one second allows, so a limit is smooth."""
        return max(1, min(default, self.records_per_s)) if self.records_per_s else default
