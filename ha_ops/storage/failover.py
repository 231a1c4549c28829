"""Storage master loss recovered without a human: a small watcher on the metalogger's host.

Why a watcher of its own and not the remediation controller: the controllers keep their lease and state on the
shared storage (in the full lab, on MooseFS itself), so a lost master stalls the very files a controller would have
to write before acting. The watcher needs nothing of the shared storage: it runs beside the metalogger, the only
host a master can be restored on, and keeps its audit log on local disk.

When (MasterWatch, pure): the master's client port refuses or times out for `after_s`, while this watcher still
reaches a majority of its peers (the chunkservers). A watcher that reaches neither is cut off itself and does
nothing: promoting from the wrong side of a partition would leave two masters writing one file system.

How (FailoverWatcher): fence first, as for a hung Slurm primary (`fence_primary`): the old master's unit masked
and its service address removed over ssh, or, when ssh cannot reach its host, the host powered off through its BMC.
Only a confirmed fence is followed by the promotion on this host (the metalogger stopped, the address added and
announced, `mfsmaster -a`). Every step is audited in a hash-chained log; a promotion is done once (this host then runs
the master, and has no metalogger left to promote).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from ha_ops.remediation.audit import AuditLog
from ha_ops.remediation.config import NodeAccess
from ha_ops.remediation.slurm_fence import fence_primary, last_line
from ha_ops.util.atomic import write_atomic
from ha_ops.util.command_template import NodeCommand
from ha_ops.util.models import ConfigModel
from ha_ops.util.proc import CommandResult
from ha_ops.util.yamlconfig import load_model

log = logging.getLogger(__name__)

CLIENT_PORT = 9421  # MooseFS: the master's port for clients
CHUNKSERVER_PORT = 9422  # MooseFS: the chunkservers' port for clients, open whether or not a master answers


def _one_word(value: str) -> str:
    """A host's name or address is one word: `gpu7;touch /tmp/x;#` or a name with a newline was accepted, and then
    probed and fenced over ssh as written (issue 44, finding 8)."""
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{value[:80]!r} is not a host name or address (a space or control character)")
    return value


def _host_port(value: str) -> str:
    """`host` or `host:port`, the port one that exists (99999 raised OverflowError in the probe's thread)."""
    host, _, port = _one_word(value).rpartition(":")
    if host and port.isdigit() and not (port.isascii() and 0 < int(port) <= 65535):
        raise ValueError(f"{value[:80]!r}: port {port} does not exist (1 to 65535)")
    return value


Host = Annotated[str, Field(min_length=1), AfterValidator(_one_word)]
HostPort = Annotated[str, Field(min_length=1), AfterValidator(_host_port)]


class FailoverConfig(ConfigModel):
    """`ha-ops storage watch --config FILE`: one watcher, on the metalogger's host."""

    id: str = Field(min_length=1, description="This watcher's name in the audit log (its host).")
    master_host: Host = Field(description="The host running the master: fenced on loss.")
    master_address: Host = Field(description="The master's service address (what clients mount).")
    master_port: int = Field(CLIENT_PORT, ge=1, le=65535)
    peers: list[HostPort] = Field(
        min_length=1,
        description="host:port this watcher must mostly reach to trust its own view (the chunkservers' 9422): one "
        "that reaches no majority is cut off itself and promotes nothing.",
    )
    poll_s: float = Field(0.5, gt=0)
    probe_timeout_s: float = Field(1.0, gt=0)
    after_s: float = Field(5.0, gt=0, description="The master unanswered this long before it is fenced.")
    retry_s: float = Field(30.0, gt=0, description="After a failed fence or promotion, the pause before another try.")
    fence_command: str = Field(
        min_length=1,
        description="Run on the master's host over ssh: stop it for good and drop its service address, e.g. "
        "'systemctl mask --now moosefs-master && ip addr del 10.0.0.5/24 dev eth0'.",
    )
    power_off_command: NodeCommand | None = Field(
        None,
        description="Run here when the master's host does not answer ssh; exits 0 only once its BMC reports off "
        "(with {node}), e.g. 'ha-ops power off {node} --inventory /etc/ha-ops/hosts.yml'. Without it such a master "
        "stays unfenced and nothing is promoted.",
    )
    promote_command: str = Field(
        min_length=1,
        description="Run here once the master is fenced: the metalogger stopped, the service address added and "
        "announced, a master started from the metalogger's files (mfsmaster -a).",
    )
    state_dir: Path = Field(description="Local disk (not the shared storage): the audit log and the promoted mark.")
    access: NodeAccess = NodeAccess()
    dry_run: bool = Field(False, description="Decide and audit; fence and promote nothing.")

    @field_validator("peers")
    @classmethod
    def _each_peer_once(cls, peers: list[str]) -> list[str]:
        """A peer listed twice (`cs1` and `cs1:9422` too) counts twice toward the majority that lets this watcher
        trust its own view: a watcher reaching that one chunkserver alone would promote."""
        seen: dict[tuple[str, int], str] = {}
        for peer in peers:
            if (where := _split(peer)) in seen:
                raise ValueError(f"{peer} is listed twice (also as {seen[where]}): a majority counts each peer once")
            seen[where] = peer
        return peers


def load_failover_config(path: Path) -> FailoverConfig:
    return load_model(path, FailoverConfig)


Verdict = Literal["up", "waiting", "blind", "act"]


@dataclass
class MasterWatch:
    """Pure bookkeeping over probes: when the master counts as lost."""

    after_s: float
    down_since: float | None = None

    def observe(self, master_answers: bool, peers_reached: int, peers: int, now: float) -> Verdict:
        if master_answers:
            self.down_since = None
            return "up"
        if peers_reached * 2 <= peers:
            # This side of the network reaches too little to judge: the master may be fine where the clients are.
            self.down_since = None
            return "blind"
        if self.down_since is None:
            self.down_since = now
        return "act" if now - self.down_since >= self.after_s else "waiting"


def tcp_answers(address: str, port: int, timeout: float) -> bool:
    try:
        socket.create_connection((address, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def _split(peer: str) -> tuple[str, int]:
    host, _, port = peer.rpartition(":")
    return (host, int(port)) if host and port.isdigit() else (peer, CHUNKSERVER_PORT)


class FailoverWatcher:
    def __init__(
        self,
        config: FailoverConfig,
        run_on: Callable[[str, str], CommandResult],
        run_here: Callable[[str], CommandResult],
        answers: Callable[[str, int, float], bool] = tcp_answers,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.run_on, self.run_here, self.answers, self.clock = run_on, run_here, answers, clock
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.audit = AuditLog.at(config.state_dir / "audit.jsonl")
        self.watch = MasterWatch(config.after_s)
        self.fenced = False
        self.not_before = 0.0
        self._stop = threading.Event()

    @property
    def promoted_mark(self) -> Path:
        return self.config.state_dir / "promoted"

    def promoted(self) -> bool:
        return self.promoted_mark.exists()

    def _peers_reached(self) -> int:
        timeout = self.config.probe_timeout_s
        found = [False] * len(self.config.peers)

        def probe(i: int, peer: str) -> None:
            found[i] = self.answers(*_split(peer), timeout)

        # Together: one timed-out peer must not stretch the poll past the others.
        threads = [threading.Thread(target=probe, args=(i, p), daemon=True) for i, p in enumerate(self.config.peers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout + 1)
        return sum(found)

    def _audit(self, what: str, why: str, before: str, after: str) -> None:
        who = f"storage-watch {self.config.id}" + (" (dry run)" if self.config.dry_run else "")
        self.audit.append(at=self.clock(), who=who, what=what, node=self.config.master_host, why=why, before=before,
                          after=after)  # fmt: skip

    def step(self) -> Verdict | Literal["promoted"]:
        """One poll; fences and promotes when the master is lost. Returns what it found."""
        if self.promoted():
            return "promoted"
        cfg = self.config
        master = self.answers(cfg.master_address, cfg.master_port, cfg.probe_timeout_s)
        peers = len(cfg.peers) if master else self._peers_reached()  # asked only when the master is silent
        verdict = self.watch.observe(master, peers, len(cfg.peers), self.clock())
        if verdict != "act" or self.clock() < self.not_before:
            return verdict
        self.failover()
        return "promoted" if self.promoted() else verdict

    def failover(self) -> None:
        cfg = self.config
        since = self.watch.down_since or self.clock()
        why = f"master {cfg.master_address}:{cfg.master_port} unanswered for {self.clock() - since:.1f} s"
        if cfg.dry_run:
            self._audit("fence_storage_master", why, "unanswered", "dry run: not fenced")
            self._audit("promote_metalogger", f"{cfg.master_host} fenced", "metalogger", "dry run: not promoted")
            self.not_before = self.clock() + cfg.retry_s  # said once per retry_s while the master stays down
            return
        if not self.fenced:
            run_on = self.run_on
            outcome = fence_primary(cfg.master_host, cfg.fence_command, cfg.power_off_command, run_on, self.run_here)
            self._audit("fence_storage_master", why, "unanswered", outcome.said)
            if not outcome.fenced:
                log.error("storage master not fenced, so not promoted: %s", outcome.said)
                self.not_before = self.clock() + cfg.retry_s
                return
            self.fenced = True
        result = self.run_here(cfg.promote_command)
        said = "a master runs here from the metalogger's files" if result.ok else f"failed: {last_line(result)}"
        self._audit("promote_metalogger", f"{cfg.master_host} fenced", "metalogger", said)
        if not result.ok:
            log.error("promotion failed (tried again in %g s): %s", cfg.retry_s, said)
            self.not_before = self.clock() + cfg.retry_s
            return
        write_atomic(self.promoted_mark, f"{self.clock()}\n")
        log.warning("storage master promoted on %s after %s", cfg.id, why)

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Watch until stopped. After a promotion it only idles: this host now runs the master."""
        told = ""
        while not self._stop.is_set():
            found = self.step()
            if found != told and found in ("blind", "waiting", "promoted"):
                log.warning("storage watch: %s", found)
            told = found
            self._stop.wait(self.config.poll_s if found != "promoted" else 60.0)
