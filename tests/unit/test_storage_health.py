"""Parsing MooseFS's porcelain output (mfscli -p) into the storage's health; samples taken from the lab."""

from __future__ import annotations

import threading
import time

from ha_ops.storage.exporter import StorageCollector
from ha_ops.storage.moosefs import StorageHealth, parse_health

INFO = (
    "metadata servers:\t10.77.0.5\t3.0.117\t-\t1796099172.193078\t4 704\tnot available\t476192768\n\n"
    "master info:\tmaster version\t3.0.117\nmaster info:\ttotal space\t1610612736\n"
    "master info:\tavail space\t1582510080\nmaster info:\tchunks\t580\n"
    "all chunks matrix:\tchunkclass undergoal\t0\nall chunks matrix:\tchunkclass missing\t0\n"
)
SERVERS = (
    "chunk servers:\tcs1\t9422\t1\t-\t3.0.117\t1\tmaintenance_off\t511\t9416704\t536870912\t-\t0\t0\t0\n"
    "chunk servers:\tcs3\t9422\t2\t-\t3.0.117\t1\tmaintenance_off\t486\t10153984\t536870912\t-\t0\t0\t0\n"
)
DEAD = (
    "Working master servers not found !!! - maybe you are using wrong port number or wrong dns name\n\n"
    "metadata servers:\t10.77.0.5\t0.0.0\tDEAD\tnot available\t0\tnot available\tnot available\n"
)


def test_a_master_that_answers_with_chunkservers_is_healthy() -> None:
    health = parse_health(INFO + SERVERS + "\n")
    assert health.master_up and health.chunkservers == ["cs1", "cs3"] and health.chunks == 580
    assert health.total_bytes == 1610612736 and health.healthy


def test_mfscli_exiting_0_without_a_master_means_the_master_is_down() -> None:
    health = parse_health(DEAD)
    assert not health.master_up and not health.healthy


def test_a_master_without_chunkservers_is_not_healthy() -> None:
    assert not parse_health(INFO).healthy


def test_chunks_under_goal_are_not_healthy() -> None:
    info = INFO.replace("chunkclass undergoal\t0", "chunkclass undergoal\t7")
    health = parse_health(info + SERVERS)
    assert health.undergoal == 7 and not health.healthy


def test_the_metaloggers_are_counted_from_the_same_output() -> None:
    assert parse_health(INFO + SERVERS + "metadata backup loggers:\t10.77.0.6\t3.0.117\n").metaloggers == 1


class CountingStorage:
    """A MooseFS whose every health read is slow and counted."""

    def __init__(self) -> None:
        self.reads = 0

    def health(self) -> StorageHealth:
        self.reads += 1
        time.sleep(0.2)
        return parse_health(INFO + SERVERS)


def test_scrapes_that_arrive_together_share_one_read_of_the_master() -> None:
    fs = CountingStorage()
    now = [100.0]
    collector = StorageCollector(fs, 3, fresh_s=1.0, clock=lambda: now[0])  # type: ignore[arg-type]
    scrapes = [threading.Thread(target=lambda: list(collector.collect())) for _ in range(5)]
    for scrape in scrapes:
        scrape.start()
    for scrape in scrapes:
        scrape.join(5)
    assert fs.reads == 1
    now[0] += 1.0  # a second later: read again
    metrics = {m.name: m.samples[0].value for m in collector.collect()}
    assert fs.reads == 2 and metrics["ha_ops_storage_chunkservers"] == 2.0
