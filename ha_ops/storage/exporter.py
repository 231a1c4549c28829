"""Prometheus metrics of the storage, read from the master at every scrape."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ha_ops.storage.moosefs import MooseFS, StorageHealth


class StorageCollector(Collector):
    def __init__(
        self,
        fs: MooseFS,
        expected_chunkservers: int = 0,
        fresh_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fs = fs
        self.expected = expected_chunkservers
        self.fresh_s = fresh_s
        self.clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, StorageHealth] | None = None

    def _health(self) -> StorageHealth:
        """One read of the master at a time, reused for `fresh_s`: scrapes that arrive while one read is slow wait
        for it instead of each starting another (they piled up to 13 s a scrape on a busy machine)."""
        with self._lock:
            if self._last is None or self.clock() - self._last[0] >= self.fresh_s:
                self._last = (self.clock(), self.fs.health())
            return self._last[1]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        health = self._health()
        yield GaugeMetricFamily(
            "ha_ops_storage_master_up", "1 while the MooseFS master answers", value=float(health.master_up)
        )
        if not health.master_up:
            return
        yield GaugeMetricFamily(
            "ha_ops_storage_chunkservers", "Connected chunkservers", value=float(len(health.chunkservers))
        )
        yield GaugeMetricFamily(
            "ha_ops_storage_chunkservers_expected", "Chunkservers the spec has", value=float(self.expected)
        )
        yield GaugeMetricFamily("ha_ops_storage_metaloggers", "Connected metaloggers", value=float(health.metaloggers))
        yield GaugeMetricFamily("ha_ops_storage_chunks", "Chunks", value=float(health.chunks))
        yield GaugeMetricFamily(
            "ha_ops_storage_chunks_undergoal", "Chunks below their replica count", value=float(health.undergoal)
        )
        yield GaugeMetricFamily(
            "ha_ops_storage_chunks_endangered", "Chunks with a single copy left", value=float(health.endangered)
        )
        yield GaugeMetricFamily("ha_ops_storage_chunks_missing", "Chunks with no copy", value=float(health.missing))
        yield GaugeMetricFamily("ha_ops_storage_total_bytes", "Total space", value=float(health.total_bytes))
        yield GaugeMetricFamily("ha_ops_storage_avail_bytes", "Available space", value=float(health.avail_bytes))
