"""Slurm through its commands (scontrol, sinfo, squeue), each with a timeout and bounded retries.

Slurm's own clients retry for 1.5 x SlurmctldTimeout and hang on a frozen controller, so every call here is
wrapped in our own timeout (shared/LAB-NOTES.md).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from ha_ops.errors import CommandFailed, CommandTimeout, TransportError
from ha_ops.schedulers.base import REASON_PREFIX, SchedulerJob, SchedulerNode
from ha_ops.transport.base import Transport
from ha_ops.util.proc import CommandResult
from ha_ops.util.wait import wait_for

log = logging.getLogger(__name__)

# Reliability tiers (remediation/history.py) as Slurm places work: lower Weight is picked first, and the feature
# `reliable` (only on reliable nodes) is what `--constraint=reliable` asks for (docs/fleet.md).
TIER_WEIGHTS = {"reliable": 1, "standard": 10, "suspect": 100}
# Nodes named in one `scontrol update`: its argument stays a few KiB (names of 10-20 characters), well inside what a
# command line and one slurmctld RPC carry.
BATCH_LIMIT = 256
RELIABLE_FEATURE = "reliable"

# Slurm's names for the scheduler-neutral records (base.py), which began here.
SlurmNode = SchedulerNode
SlurmJob = SchedulerJob


def _reason(reason: str) -> str:
    return (reason if reason.startswith(REASON_PREFIX) else f"{REASON_PREFIX} {reason}")[:200]


class Slurm:
    batch_limit = BATCH_LIMIT  # nodes one drain, mark_down or resume may name (the executor batches up to it)

    def __init__(self, transport: Transport, timeout: float = 10.0, retries: int = 2, retry_wait: float = 0.5) -> None:
        self.transport = transport
        self.timeout = timeout
        self.retries = retries
        self.retry_wait = retry_wait

    def _run(self, argv: list[str]) -> CommandResult:
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                return self.transport.run(argv, timeout=self.timeout)
            except (CommandTimeout, CommandFailed) as exc:
                last = exc
                log.debug("%s failed (attempt %d): %s", argv[0], attempt + 1, exc)
                if attempt < self.retries:
                    time.sleep(self.retry_wait)
        assert last is not None
        raise last

    def _node_records(self) -> dict[str, dict[str, Any]]:
        """Every node as `sinfo --json` describes it (Slurm 22.05 and later): structured, so a reason's text is a
        reason and nothing else. (Parsed from `scontrol show node -o`, the reason `x [a@b] State=IDLE` once made a
        drained node read as IDLE, and `NodeName=n9` in a reason broke every read; sinfo's %E line breaks with a
        newline in a reason.) `sinfo --json` lists every node whatever the filters: one call serves one node or all."""
        out = self._run(["sinfo", "--json"]).stdout
        try:
            nodes = json.loads(out).get("nodes")
        except (ValueError, AttributeError) as exc:
            raise TransportError(f"sinfo --json did not answer a JSON object: {exc}: {out[:200]!r}") from None
        if not isinstance(nodes, list):
            raise TransportError(f"sinfo --json answered no node list: {out[:200]!r}")
        return {str(n.get("name")): n for n in nodes if isinstance(n, dict) and n.get("name")}

    def node(self, name: str) -> SlurmNode:
        found = self.nodes([name]).get(name)
        if found is None:
            raise TransportError(f"Slurm does not describe node {name!r}")
        return found

    def nodes(self, names: list[str]) -> dict[str, SlurmNode]:
        """The named nodes Slurm describes, from one read (`sinfo --json` lists them all anyway)."""
        records = self._node_records()
        found = {}
        for name in names:
            if name in records:
                base, flags = state_parts(records[name])
                found[name] = SlurmNode(name, scontrol_state(base, flags), str(records[name].get("reason") or ""))
        return found

    def drain(self, name: str, reason: str) -> None:
        self.drain_nodes([name], reason)

    def drain_nodes(self, names: list[str], reason: str) -> None:
        """One `scontrol update` for every node named: Slurm takes a list, and it is one RPC to slurmctld however
        many nodes it names (a storm's drains do not queue behind each other there)."""
        self._update_nodes(names, "State=DRAIN", f"Reason={_reason(reason)}")

    def mark_down(self, name: str, reason: str) -> None:
        self.mark_down_nodes([name], reason)

    def mark_down_nodes(self, names: list[str], reason: str) -> None:
        """DOWN: Slurm ends the nodes' jobs at once (requeueing those that allow it) instead of waiting for a lost
        node to confirm them."""
        self._update_nodes(names, "State=DOWN", f"Reason={_reason(reason)}")

    def resume(self, name: str) -> None:
        self.resume_nodes([name])

    def resume_nodes(self, names: list[str]) -> None:
        self._update_nodes(names, "State=RESUME")

    def _update_nodes(self, names: list[str], *settings: str) -> None:
        for start in range(0, len(names), BATCH_LIMIT):
            self._run(["scontrol", "update", f"NodeName={','.join(names[start : start + BATCH_LIMIT])}", *settings])

    def _job_records(self) -> list[dict[str, Any]]:
        """Every job as `squeue --json` describes it: structured, so a job's name is a name and nothing else. (Read
        from `squeue -o "%i|%T|%N|%j"`, a newline in a job name split one job into two lines; from `scontrol show
        job -o`, the name `x Requeue=1 ` made any job read as requeueable.) Slurm 22.05's `squeue --json` ignores
        filters such as -j and lists every job, so callers filter here."""
        out = self._run(["squeue", "--json"]).stdout
        try:
            answer = json.loads(out)
        except ValueError as exc:
            raise TransportError(f"squeue --json did not answer JSON: {exc}: {out[:200]!r}") from None
        jobs = answer.get("jobs") if isinstance(answer, dict) else None
        if not isinstance(jobs, list):
            raise TransportError(f"squeue --json answered no job list: {out[:200]!r}")
        if answer.get("errors"):
            raise TransportError(f"squeue --json reported errors: {str(answer['errors'])[:200]}")
        return [j for j in jobs if isinstance(j, dict) and j.get("job_id") is not None]

    def _job_record(self, job_id: str) -> dict[str, Any] | None:
        return next((j for j in self._job_records() if str(j["job_id"]) == job_id), None)

    def jobs(self) -> list[SlurmJob]:
        """The jobs not yet finished (what plain `squeue` lists; --json also returns those slurmctld still holds
        after they ended, for MinJobAge)."""
        found = []
        for record in self._job_records():
            state = job_state_word(record.get("job_state"))
            if state not in FINISHED_JOB_STATES:
                nodes = tuple(expand_hostlist(str(record.get("nodes") or "")))
                ended = job_exit_code(record.get("exit_code")) if state == "COMPLETING" else None
                found.append(SlurmJob(str(record["job_id"]), state, nodes, str(record.get("name") or ""), ended))
        return found

    def node_states(self) -> dict[str, str]:
        """Every node's state in one call, lower case as sinfo prints it (idle, down*, drained, ...)."""
        return {name: state for name, (state, _) in self.node_states_and_reasons().items()}

    def node_states_and_reasons(self) -> dict[str, tuple[str, str]]:
        """Every node's (state in sinfo's %T words, reason) in one call; the reason is "" for a node without one."""
        found = {}
        for name, record in self._node_records().items():
            base, flags = state_parts(record)
            found[name] = (sinfo_state(base, flags), str(record.get("reason") or ""))
        return found

    def controllers(self, timeout: float = 30.0) -> list[tuple[str, str]]:
        """[(host, "UP" | "DOWN"), ...] in SlurmctldHost order (primary first), from `scontrol ping`. One attempt,
        with a longer timeout: a hung controller costs the ping a whole MessageTimeout before it asks the next."""
        out = self.transport.run(["scontrol", "ping"], timeout=timeout, check=False).stdout
        found = []
        for line in out.splitlines():  # "Slurmctld(primary) at ctl1 is UP"
            words = line.split()
            if len(words) >= 5 and words[0].startswith("Slurmctld(") and words[1] == "at":
                found.append((words[2], words[-1]))
        return found

    def jobs_on(self, node: str) -> list[SlurmJob]:
        return [j for j in self.jobs() if node in j.nodes]

    def job_requeueable(self, job_id: str) -> bool:
        record = self._job_record(job_id)
        return record is not None and record.get("requeue") is True

    def requeue(self, job_id: str) -> None:
        """Requeue a job and make it eligible at once.

        Slurm holds a requeued job until its old credential expires (AuthInfo cred_expire, 120 s by default) so that
        it cannot start again beside a still-running copy; the node it ran on is drained first, so it may start now.
        """
        self._run(["scontrol", "requeue", job_id])
        self.release_requeued(job_id)

    def release_requeued(self, job_id: str) -> None:
        """Make a requeued job eligible now (its old node is drained or fenced). The requeue completes
        asynchronously and sets the hold when the job is pending again: release it then."""
        wait_for(f"job {job_id} pending again", lambda: self.job_state(job_id) == "PENDING", timeout=15, interval=0.1)
        # slurmd revokes the credentials of the job it killed for the requeue, by whole seconds: a launch credential
        # made within the same second counts as revoked ("Job N already killed, do not launch batch job") and the
        # job fails on any node that ran it (the other nodes of a multi-node job). Release it in the next second.
        time.sleep(1.05 - time.time() % 1.0)
        self._run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])

    def job_state(self, job_id: str) -> str:
        """One job's state word (PENDING, RUNNING, COMPLETED, ...), GONE once slurmctld forgot it. Plain `squeue -j
        ID -o %T` first: the answer is one word from Slurm's own enumeration (no user text to be spoofed by),
        release_requeued polls it every 0.1 s, and 22.05's --json would read every job on each poll. A finished job
        is not in squeue's list: its structured record says how it ended."""
        out = self._run(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip()
        if out:
            return out
        record = self._job_record(job_id)
        return job_state_word(record.get("job_state")) if record is not None else "GONE"

    def partition_nodes(self, partition: str) -> list[str]:
        """The partition's nodes, from the structured node records (each lists its partitions)."""
        return [name for name, record in self._node_records().items() if partition in (record.get("partitions") or [])]

    def set_partition_nodes(self, partition: str, nodes: list[str]) -> None:
        self._run(["scontrol", "update", f"PartitionName={partition}", f"Nodes={','.join(nodes)}"])

    def set_reliability(self, name: str, tier: str) -> None:
        """The tier's Weight, and the feature `reliable` on a reliable node only, the node's other features kept (read
        first: scontrol replaces the whole list). Idempotent. (Changes made with scontrol last until slurmctld
        restarts without its state or is reconfigured: slurm.conf's values then return; docs/fleet.md.)"""
        failed = self.set_reliabilities({name: tier})
        if name in failed:
            raise failed[name]

    def set_reliabilities(self, tiers: dict[str, str]) -> dict[str, Exception]:
        """set_reliability of many nodes in one read of the nodes and one `scontrol update` per group that ends
        alike (the same Weight and features: a storm's nodes mostly do); what failed, by node."""
        failed: dict[str, Exception] = {}
        for name, tier in tiers.items():
            if tier not in TIER_WEIGHTS:
                failed[name] = ValueError(f"unknown reliability tier {tier!r} (one of {', '.join(TIER_WEIGHTS)})")
        records = self._node_records() if len(failed) < len(tiers) else {}
        groups: dict[tuple[str, ...], list[str]] = {}
        for name, tier in tiers.items():
            if name in failed:
                continue
            if name not in records:
                failed[name] = TransportError(f"Slurm does not describe node {name!r}")
                continue
            groups.setdefault(reliability_settings(records[name], tier), []).append(name)
        for settings, names in groups.items():
            try:
                self._update_nodes(names, *settings)
            except (CommandTimeout, CommandFailed) as exc:
                failed.update(dict.fromkeys(names, exc))
        return failed


def reliability_settings(record: dict[str, Any], tier: str) -> tuple[str, ...]:
    """What `scontrol update` sets for the tier: its Weight, and the feature lists where `reliable` must come or go."""
    settings = [f"Weight={TIER_WEIGHTS[tier]}"]
    available = feature_list(record.get("features"))
    active = feature_list(record.get("active_features"), default=available)
    want_available = with_reliable(available, tier == "reliable")
    want_active = with_reliable(active, tier == "reliable")
    if want_available != available or want_active != active:
        settings += [f"AvailableFeatures={','.join(want_available)}", f"ActiveFeatures={','.join(want_active)}"]
    return tuple(settings)


def feature_list(value: Any, default: list[str] | None = None) -> list[str]:
    """A node record's features: a comma-separated string (Slurm 22.05's sinfo --json) or a list (later releases);
    None or missing: `default` (active features are the available ones without a node_features plugin)."""
    if value is None:
        return list(default or [])
    words = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return [w.strip() for w in words if w.strip() and w.strip() != "(null)"]


def with_reliable(features: list[str], reliable: bool) -> list[str]:
    """The features with `reliable` present (at the end) or absent, the others in their order."""
    kept = [f for f in features if f != RELIABLE_FEATURE]
    return [*kept, RELIABLE_FEATURE] if reliable else kept


# A job in one of these has ended: plain squeue no longer lists it.
FINISHED_JOB_STATES = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}
)


def job_exit_code(value: Any) -> int | None:
    """A job record's exit code: Slurm 22.05's wait status (a number), or the object of later releases (its
    return_code, or 128 + the signal that killed it); None where the record has none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, dict):
        return None
    signal = _number(value.get("signal", {}).get("id") if isinstance(value.get("signal"), dict) else None)
    if signal:
        return 128 + signal
    return _number(value.get("return_code"))


def _number(value: Any) -> int | None:
    """An int, or the {"set", "number"} object later releases wrap numbers in (None when not set)."""
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set", True) and isinstance(value.get("number"), int) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def job_state_word(state: Any) -> str:
    """A job record's state: Slurm 22.05's `job_state` word, or the list of later releases (base state first)."""
    if isinstance(state, list):
        return str(state[0]).upper() if state else "UNKNOWN"
    return str(state or "UNKNOWN").upper()


BASE_STATES = ("UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE")


def state_parts(record: dict[str, Any]) -> tuple[str, list[str]]:
    """A node record's base state and flags, upper case: Slurm 22.05's `state` word and `state_flags` list, or the
    one `state` list of later releases (the base state among the flags)."""
    state = record.get("state")
    flags = [str(f).upper() for f in record.get("state_flags") or []]
    if isinstance(state, list):
        words = [str(w).upper() for w in state]
        base = next((w for w in words if w in BASE_STATES), "UNKNOWN")
        return base, [*flags, *(w for w in words if w != base)]
    return str(state or "unknown").upper(), flags


def scontrol_state(base: str, flags: list[str]) -> str:
    """As `scontrol show node` prints State=: IDLE, IDLE+DRAIN, DOWN+DRAIN+NOT_RESPONDING."""
    return "+".join([base, *flags])


def sinfo_state(base: str, flags: list[str]) -> str:
    """As `sinfo -o %T` prints it (Slurm's node_state_string, for the states a GPU partition sees): drained or
    draining for a drained node by whether work still runs, down, completing, else the base state; `*` when not
    responding."""
    star = "*" if "NOT_RESPONDING" in flags else ""
    if "MAINTENANCE" in flags:
        return "maint" + star
    if "DRAIN" in flags:
        busy = "COMPLETING" in flags or base in ("ALLOCATED", "MIXED")
        return ("draining" if busy else "drained") + star
    if base == "DOWN":
        return "down" + star
    if "COMPLETING" in flags:
        return "completing" + star
    return base.lower() + star


def expand_hostlist(expression: str) -> list[str]:
    """Slurm hostlist expressions such as `gpu[1-3,5],ctl1` -> names (what `scontrol show hostnames` does)."""
    names: list[str] = []
    depth, token = 0, ""
    parts = []
    for char in expression.strip():
        if char == "," and depth == 0:
            parts.append(token)
            token = ""
            continue
        depth += char == "["
        depth -= char == "]"
        token += char
    if token:
        parts.append(token)
    for part in parts:
        if "[" not in part:
            names.append(part)
            continue
        prefix, rest = part.split("[", 1)
        ranges, suffix = rest.split("]", 1)
        for item in ranges.split(","):
            if "-" in item:
                lo, hi = item.split("-", 1)
                names += [f"{prefix}{n:0{len(lo)}d}{suffix}" for n in range(int(lo), int(hi) + 1)]
            else:
                names.append(f"{prefix}{item}{suffix}")
    return names
