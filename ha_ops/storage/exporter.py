"""Prometheus metrics of the storage, read from the master at every scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ha_ops.storage.moosefs import MooseFS


class StorageCollector(Collector):
    def __init__(self, fs: MooseFS, expected_chunkservers: int = 0) -> None:
        self.fs = fs
        self.expected = expected_chunkservers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        health = self.fs.health()
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
