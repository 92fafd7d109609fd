"""The runner's counters and call latencies, read with ``RewardRunner.stats()``."""

from __future__ import annotations

import collections
import math
import threading
from typing import Any

LATENCY_WINDOW = 4096  # recent calls the latency percentiles are computed over


class Stats:
    COUNTERS = (
        "calls",
        "cache_hits",
        "timeouts",
        "errors",
        "worker_restarts",
        "worker_start_failures",
        "inline_calls",
        "process_calls",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(self.COUNTERS, 0)
        self.latencies: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            out: dict[str, Any] = dict(self.counts)
            lat = sorted(self.latencies)
        out["latency_p50_ms"] = percentile(lat, 0.50) * 1000.0
        out["latency_p99_ms"] = percentile(lat, 0.99) * 1000.0
        return out

    def reset(self) -> None:
        with self.lock:
            self.counts = dict.fromkeys(self.COUNTERS, 0)
            self.latencies.clear()


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list; 0.0 for an empty one."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]
