"""The persisted rollout: every node's step, every wave's progress, the phase, and why it stopped.

Files in the state directory (default /var/lib/ha-ops/rollout, `HA_OPS_ROLLOUT_DIR`):
- `state.json`   the RolloutState (versioned JSON), written atomically after every step by the one running
                 executor, and by nobody else.
- `control.json` what an operator asked for from another shell (pause, abort). Kept apart from state.json so that
                 `ha-ops rollout pause` never races the executor's writes: the CLI writes it (under `control.lock`),
                 the executor only reads it, between steps.
- `rollout.lock` flock held by the process driving the rollout: a second one is refused while it lives. The kernel
                 drops the lock when that process dies, even by kill -9; the state then says where it stopped. The
                 next holder first waits for what the dead one started (ha_ops.rollout.leftovers).
- `history/`     the state of earlier, finished rollouts.

Node steps (the normal path first):
    pending -> draining -> drained -> applying -> applied -> validating -> returning -> done
A node that fails (the role rolled it back, validation failed, or a step raised after the driver may have changed):
    ... -> rolling_back -> returning -> failed_rolled_back
A changed node taken back because the rollout halted or was aborted with rollback:
    done -> draining -> drained -> rolling_back -> returning -> rolled_back
A node drained but not yet changed when the rollout pauses, halts or aborts goes back to service and to `pending`;
one whose jobs outlive the drain timeout, or that is out of service or unreachable before it is touched, ends
`skipped`. `failed` means a rollback or a return itself failed: the node stays out of service for a person.

Phases: planned -> running -> completed; running <-> paused; running -> rolling_back -> halted | aborted.
`rolling_back` is the stopping phase: in-flight nodes are settled and, when asked (policy.rollback_on_halt, or
`abort --rollback`), every changed node is rolled back, newest first; `outcome` says which phase follows.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from ha_ops.errors import HaOpsError
from ha_ops.rollout import leftovers
from ha_ops.rollout.inputs import RolloutInputs
from ha_ops.rollout.plan import Plan
from ha_ops.rollout.policy import RolloutPolicy
from ha_ops.rollout.protocols import DriverFacts
from ha_ops.util.atomic import write_atomic

STATE_VERSION = 1
DEFAULT_STATE_DIR = Path("/var/lib/ha-ops/rollout")
LOG_LINES = 200  # notable events kept in the state (halts, gates, pauses); progress goes to the terminal


class RolloutError(HaOpsError):
    """A rollout request was refused (another one is active, nothing to resume, no room under max_unavailable)."""

    exit_code = 1


class RolloutStateError(HaOpsError):
    """The state file cannot be trusted (damaged, or written by another version)."""

    exit_code = 3


class NodeStep(StrEnum):
    PENDING = "pending"  # nothing done yet
    DRAINING = "draining"  # drain requested; its jobs are awaited (or requeued)
    DRAINED = "drained"  # out of service, no jobs
    APPLYING = "applying"  # recorded before the role runs: a crash here means "look before applying again"
    APPLIED = "applied"  # the node runs the target version
    VALIDATING = "validating"
    RETURNING = "returning"  # being returned to service; ends in `return_to`
    DONE = "done"
    FAILED_ROLLED_BACK = "failed_rolled_back"  # failed, back on its previous driver and in service
    ROLLING_BACK = "rolling_back"  # switching back to the previous slot (failure, or the halt's rollback)
    ROLLED_BACK = "rolled_back"  # was done, taken back because the rollout halted or was aborted
    SKIPPED = "skipped"  # never changed: see `note`
    FAILED = "failed"  # a rollback or return failed: left out of service, needs a person


TERMINAL_STEPS = frozenset(
    {NodeStep.DONE, NodeStep.FAILED_ROLLED_BACK, NodeStep.ROLLED_BACK, NodeStep.SKIPPED, NodeStep.FAILED}
)
# Steps in which the rollout holds the node out of service.
OUT_OF_SERVICE_STEPS = frozenset(
    {
        NodeStep.DRAINING,
        NodeStep.DRAINED,
        NodeStep.APPLYING,
        NodeStep.APPLIED,
        NodeStep.VALIDATING,
        NodeStep.RETURNING,
        NodeStep.ROLLING_BACK,
        NodeStep.FAILED,
    }
)
FAILURE_STEPS = frozenset({NodeStep.FAILED_ROLLED_BACK, NodeStep.FAILED})


class Phase(StrEnum):
    PLANNED = "planned"
    RUNNING = "running"
    PAUSED = "paused"
    HALTED = "halted"
    ROLLING_BACK = "rolling_back"
    COMPLETED = "completed"
    ABORTED = "aborted"


TERMINAL_PHASES = frozenset({Phase.HALTED, Phase.COMPLETED, Phase.ABORTED})


class NodeState(BaseModel):
    name: str
    domain: str
    wave: int  # 0 is the canary
    batch: int
    step: NodeStep = NodeStep.PENDING
    before: DriverFacts | None = None  # the node's driver facts read before it was drained (the snapshot)
    changed: bool = False  # the apply started: the node may run the target version
    undo: bool = False  # being taken back (rollout stopping): `drained` leads to rolling_back, not applying
    return_to: NodeStep | None = None  # the step `returning` ends in
    failure: str = ""  # why the node failed
    note: str = ""  # why it was skipped or returned untouched
    attempts: dict[str, int] = Field(default_factory=dict)  # calls per action, re-entries after a crash included
    finished: int = 0  # order in which nodes were done: the halt's rollback goes newest first
    updated_at: float = 0.0
    began_at: float = 0.0  # when it was taken out of service (0: never): a changed node's time, for the ETA


class WaveState(BaseModel):
    index: int
    name: str
    size: str
    batches: list[list[str]]
    status: Literal["pending", "running", "soaking", "done"] = "pending"
    soak_until: float | None = None  # wall clock: a soak cut short by a crash resumes where it was
    gate: str = ""  # the gate's verdict once it ran

    def nodes(self) -> list[str]:
        return [n for batch in self.batches for n in batch]


class Control(BaseModel):
    """What an operator asked for from another shell; read by the executor between steps."""

    pause: bool = False
    abort: bool = False
    abort_rollback: bool = False
    requested_at: float = 0.0
    note: str = ""


class RolloutState(BaseModel):
    version: int = STATE_VERSION
    id: str
    kind: Literal["driver"] = "driver"
    target_version: str
    policy: RolloutPolicy
    phase: Phase = Phase.PLANNED
    outcome: Phase | None = None  # while rolling_back: halted or aborted
    undo_changed: bool = False  # while rolling_back: also roll back every changed node
    reason: str = ""  # why it paused, halted or was aborted
    created_at: float = 0.0
    updated_at: float = 0.0
    started_at: float = 0.0  # when it first ran (0: not yet)
    revision: int = 0  # grows with every write
    max_unavailable: int
    down_at_start: list[str] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)  # from the plan: node -> reason
    inputs: RolloutInputs = Field(default_factory=RolloutInputs)  # what resume rebuilds its doors from
    waves: list[WaveState]
    nodes: dict[str, NodeState]
    finished: int = 0  # last NodeState.finished handed out
    log: list[str] = Field(default_factory=list)

    def fleet(self) -> set[str]:
        return set(self.nodes) | set(self.skipped)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for node in self.nodes.values():
            out[node.step.value] = out.get(node.step.value, 0) + 1
        return out

    def note(self, line: str, now: float) -> None:
        self.log = [*self.log[-(LOG_LINES - 1) :], f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now))} {line}"]


def new_state(
    plan: Plan,
    policy: RolloutPolicy,
    rollout_id: str,
    now: float,
    inputs: RolloutInputs | None = None,
    domains: dict[str, str] | None = None,
) -> RolloutState:
    """The state of a rollout about to start: every planned node pending, in plan order."""
    waves = [
        WaveState(index=w.index, name=w.name, size=w.size, batches=[list(b) for b in w.batches]) for w in plan.waves
    ]
    domains = domains or {}
    nodes: dict[str, NodeState] = {}
    for wave in plan.waves:
        for b, batch in enumerate(wave.batches):
            for name in batch:
                nodes[name] = NodeState(name=name, domain=domains.get(name, ""), wave=wave.index, batch=b)
    return RolloutState(
        id=rollout_id,
        target_version=plan.target_version,
        policy=policy,
        created_at=now,
        updated_at=now,
        max_unavailable=plan.max_unavailable,
        down_at_start=list(plan.down),
        skipped=dict(plan.skipped),
        inputs=inputs or RolloutInputs(),
        waves=waves,
        nodes=nodes,
    )


class RolloutStore:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.state_path = self.directory / "state.json"
        self.control_path = self.directory / "control.json"
        self.lock_path = self.directory / "rollout.lock"
        self._control_lock_path = self.directory / "control.lock"
        self._lock_fd: int | None = None
        self._depth = 0

    # --- the state --------------------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.state_path.exists()

    def load(self) -> RolloutState:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            raise RolloutError(f"no rollout in {self.directory} (start one with `ha-ops rollout driver`)") from None
        except (OSError, ValueError, RecursionError) as exc:
            # Writes are atomic renames, so this is damage from outside: refuse rather than forget what was done.
            raise RolloutStateError(f"rollout state {self.state_path} is unreadable ({exc}); restore it") from exc
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            found = data.get("version") if isinstance(data, dict) else type(data).__name__
            raise RolloutStateError(f"rollout state {self.state_path} has version {found}, expected {STATE_VERSION}")
        try:
            return RolloutState.model_validate(data)
        except RecursionError:
            raise RolloutStateError(f"rollout state {self.state_path} is nested too deeply; restore it") from None
        except ValidationError as exc:
            raise RolloutStateError(
                f"rollout state {self.state_path} is invalid ({exc.error_count()} error(s): {exc})"
            ) from exc

    def save(self, state: RolloutState) -> None:
        state.revision += 1
        write_atomic(self.state_path, state.model_dump_json())

    def archive(self) -> Path | None:
        """Move a finished rollout's state (and its control requests) to history/ before a new one starts."""
        if not self.exists():
            return None
        old = self.load()
        target = self.directory / "history" / f"state-{old.id}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.state_path, target)
        self.control_path.unlink(missing_ok=True)
        return target

    # --- operator requests --------------------------------------------------------------------------------------
    def read_control(self) -> Control:
        try:
            return Control.model_validate_json(self.control_path.read_text())
        except FileNotFoundError:
            return Control()
        except (OSError, ValueError) as exc:
            raise RolloutStateError(f"{self.control_path} is unreadable ({exc}); remove it to clear requests") from exc

    def request(self, **changes: object) -> Control:
        """Read-modify-write control.json under its own lock (two operators may ask at once)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._control_lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            control = self.read_control().model_copy(update=changes)
            write_atomic(self.control_path, control.model_dump_json())
            return control
        finally:
            os.close(fd)

    # --- the rollout lock -------------------------------------------------------------------------------------
    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the rollout lock (re-entrant within this store); RolloutError naming the holder if it is taken."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RolloutError(
                f"a rollout is running from {self.directory} (lock held by pid {holder}); "
                "see `ha-ops rollout status`, or `pause`/`abort` it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd, self._depth = fd, 1
        try:
            # The lock died with an earlier holder, but what that holder started may still be changing a node.
            leftovers.wait_gone(self.directory)
            leftovers.mark(self.directory)
            yield
        finally:
            self._depth = 0
            self._lock_fd = None
            os.close(fd)  # closing the descriptor releases the flock

    def running_elsewhere(self) -> bool:
        """Whether another process holds the rollout lock now (a live executor)."""
        if self._depth or not self.lock_path.exists():
            return False
        # A bare probe: taking the lock through lock() would write this process's pid into the lock file.
        fd = os.open(self.lock_path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def refuse_if_active(self) -> None:
        """Refuse a new rollout while the previous one is not finished (call with the lock held)."""
        if not self.exists():
            return
        old = self.load()
        if old.phase not in TERMINAL_PHASES:
            raise RolloutError(
                f"rollout {old.id} to {old.target_version} is {old.phase.value}"
                + (f" ({old.reason})" if old.reason else "")
                + "; finish it with `ha-ops rollout resume` or stop it with `ha-ops rollout abort` first"
            )
