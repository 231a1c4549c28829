"""The rollout loop: waves of batches of nodes, each node driven through its persisted steps (state.py).

Over 400 lines because a node's steps and their resumption after a kill -9 read as one state machine; the pure
parts (the plan, the policy, the gates) live in their own modules.

How it stays safe across a kill -9 at any point:
- A node's step is written *before* the action it names, so a restarted executor re-enters that step. Scheduler
  actions are idempotent (protocols.py). The driver is different: before applying again, or rolling back, the
  executor reads the node's driver facts and acts only if they say the step is still to do (a snapshot of the
  facts taken before the node was drained tells a rollback the role did by itself from an older one). A node that
  reached `done` is never touched again, except by the halt's rollback.
- Waves record their soak deadline (wall clock) and their gate, so neither is repeated nor skipped.
- Operator requests (control.json) are read between steps. A pause or an abort never starts a driver change: nodes
  drained but not yet changed go back to service, nodes being changed are finished first.

Capacity: before nodes are taken out, the executor counts what is out of service now (the scheduler's view of the
fleet plus the nodes the rollout holds) and takes out at most max_unavailable minus that. With no room left (nodes
that failed and need a person) it pauses and says why.

Remediation (coordination.py, with a Coordinator): before it starts or resumes, and before each batch, the rollout
asks the remediation controllers; it does not go on while their breaker is open or a pool is under its minimum
healthy share (refused at the start, paused later). Each node it changes is in a maintenance window from before its
drain until it rests (done, rolled back, skipped or failed), renewed at each step: the controller records its
reports but leaves a failing driver change to the rollout's own rollback.

Halting: after every node, the failures of its wave are compared with the policy (the canary: more than
canary_max_failures; a wave: more than wave_max_failure_fraction of its nodes). A gate after each wave's soak
requires every node of the wave healthy. Either halts the rollout and, by default, rolls back every changed node,
newest first, one at a time; the reason is recorded and printed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from ha_ops.errors import WaitTimeout
from ha_ops.rollout.coordination import HELD_TTL_S, MAINTENANCE_TTL_S
from ha_ops.rollout.progress import describe, progress
from ha_ops.rollout.protocols import Coordinator, DriverApplier, Scheduler, Validation, Validator
from ha_ops.rollout.state import (
    FAILURE_STEPS,
    OUT_OF_SERVICE_STEPS,
    TERMINAL_PHASES,
    TERMINAL_STEPS,
    NodeState,
    NodeStep,
    Phase,
    RolloutError,
    RolloutState,
    RolloutStore,
    WaveState,
)

log = logging.getLogger(__name__)

# Slurm drain reasons written by the rollout start with this; the Slurm adapter resumes only such nodes.
DRAIN_REASON_PREFIX = "ha-ops: rollout"


class _Stop(Exception):
    """Internal: the forward loop ends here (the phase says why: paused, or rolling_back)."""


class RolloutExecutor:
    def __init__(
        self,
        store: RolloutStore,
        scheduler: Scheduler,
        applier: DriverApplier,
        validator: Validator,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        progress: Callable[[str], None] | None = None,
        soak_poll_s: float = 5.0,
        gate_wait_s: float = 120.0,
        gate_poll_s: float = 2.0,
        coordinator: Coordinator | None = None,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.applier = applier
        self.validator = validator
        self.clock = clock
        self.sleep = sleep
        self.progress = progress or (lambda line: log.info("%s", line))
        self.soak_poll_s = soak_poll_s
        # A node just returned shows as not responding (Slurm: idle*) until the controller has pinged it again.
        self.gate_wait_s = gate_wait_s
        self.gate_poll_s = gate_poll_s
        self.coordinator = coordinator
        self._announced_now: set[str] = set()  # a window just opened by _begin: _set need not renew it
        self._state: RolloutState | None = None
        # In memory only, so that a fresh process (after a crash) knows it is re-entering a step.
        self._applying_here: set[str] = set()  # entered `applying` in this process: apply without looking first
        self._drain_sent: set[str] = set()  # drain requested by this process: no need to ask again
        # wave -> its failed nodes, checked after every node: kept up to date rather than rescanned.
        self._failed: dict[int, list[str]] = {}

    @property
    def state(self) -> RolloutState:
        assert self._state is not None, "run() loads the state"
        return self._state

    # --- entry point ------------------------------------------------------------------------------------------
    def run(self) -> RolloutState:
        """Drive the rollout in the store until it completes, pauses or stops; returns the final state.

        Holds the rollout lock throughout (RolloutError if another process holds it)."""
        with self.store.lock():
            self._state = st = self.store.load()
            if st.phase in TERMINAL_PHASES:
                return st
            if st.phase in (Phase.RUNNING, Phase.ROLLING_BACK):
                self._say(f"continuing rollout {st.id} ({st.phase.value}) where it was interrupted")
            if st.phase in (Phase.PLANNED, Phase.PAUSED):
                if not self.store.read_control().abort:  # (an abort undoes: the controllers' say does not hold it)
                    self._refuse_if_blocked(st)
                self._say(f"{'starting' if st.phase == Phase.PLANNED else 'resuming'} rollout {st.id} to "
                          f"{st.target_version}: {len(st.nodes)} nodes in {len(st.waves)} waves")  # fmt: skip
                st.phase, st.reason = Phase.RUNNING, ""
                st.started_at = st.started_at or self.clock()
                st.note("running", self.clock())
                self._save()
            if st.phase == Phase.RUNNING:
                with contextlib.suppress(_Stop):
                    self._forward()
            if st.phase == Phase.ROLLING_BACK:
                self._stop()
            return st

    # --- waves ------------------------------------------------------------------------------------------------
    def _forward(self) -> None:
        st = self.state
        for wave in st.waves:
            if wave.status == "done":
                continue
            if wave.status == "pending":
                wave.status = "running"
                self._save()
                self._say(f"[{wave.name}] {len(wave.nodes())} nodes in {len(wave.batches)} batch(es)")
            if wave.status == "running":
                for b, batch in enumerate(wave.batches):
                    self._run_batch(wave, b, batch)
                last = wave is st.waves[-1]
                # Soak between waves only: after the last one there is nothing left to protect.
                wave.soak_until = self.clock() + (0.0 if last else st.policy.soak_s)
                wave.status = "soaking"
                self._save()
                if not last and st.policy.soak_s:
                    self._say(f"[{wave.name}] done; soaking {st.policy.soak_s:g} s before the gate")
            self._soak(wave)
            self._gate(wave)
            wave.status = "done"
            self._save()
        counts = st.counts()
        st.phase = Phase.COMPLETED
        st.reason = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        st.note(f"completed: {st.reason}", self.clock())
        self._save()
        self._say(f"rollout {st.id} completed: {st.reason} ({describe(progress(st, self.clock()))})")

    def _run_batch(self, wave: WaveState, b: int, batch: list[str]) -> None:
        st = self.state
        while True:
            self._check_threshold(wave)
            nodes = [st.nodes[name] for name in batch]
            in_flight = [n for n in nodes if n.step not in TERMINAL_STEPS and n.step != NodeStep.PENDING]
            if in_flight:
                for node in in_flight:
                    self._check_control()
                    self._drive(node)
                    self._check_threshold(wave)
                continue
            pending = [n for n in nodes if n.step == NodeStep.PENDING]
            if not pending:
                return
            self._check_control()
            room = self._wait_for_room()
            if room < 1:
                held = sorted(n.name for n in st.nodes.values() if n.step == NodeStep.FAILED)
                self._pause(
                    f"max_unavailable {st.max_unavailable} reached: nothing more can be taken out"
                    + (f" (left out of service, need a person: {', '.join(held)})" if held else "")
                    + "; return nodes to service, then `ha-ops rollout resume`"
                )
            why = self._blocked()
            if why is not None:
                self._pause(f"{why}; `ha-ops rollout resume` once it clears")
            self._say(f"[{wave.name}] batch {b + 1}/{len(wave.batches)}: taking out {min(room, len(pending))} "
                      f"({describe(progress(st, self.clock()))})")  # fmt: skip
            for node in pending[:room]:
                self._begin(node)

    def _soak(self, wave: WaveState) -> None:
        assert wave.soak_until is not None
        while True:
            self._check_control()
            left = wave.soak_until - self.clock()
            if left <= 0:
                return
            self.sleep(min(left, self.soak_poll_s))

    def _gate(self, wave: WaveState) -> None:
        """Every node of the wave that is back in service must be healthy within gate_wait_s."""
        waiting = [n for n in wave.nodes() if self.state.nodes[n].step in (NodeStep.DONE, NodeStep.FAILED_ROLLED_BACK)]
        # Counted, not timed alone: the check ends even where an injected clock does not move.
        for attempt in range(int(self.gate_wait_s / self.gate_poll_s) + 1):
            waiting = [name for name in waiting if not self._healthy(name)]
            if not waiting:
                break
            if attempt * self.gate_poll_s < self.gate_wait_s:
                self.sleep(self.gate_poll_s)
        if waiting:
            wave.gate = f"failed: {', '.join(waiting)} not healthy"
            self._halt(f"gate after {wave.name}: {_names(waiting)} not healthy after {self.gate_wait_s:g} s")
        wave.gate = "passed"

    def _healthy(self, name: str) -> bool:
        try:
            return self.scheduler.node_healthy(name)
        except Exception as exc:  # a node the scheduler cannot describe does not pass a gate
            log.debug("health of %s: %s", name, exc)
            return False

    def _check_threshold(self, wave: WaveState) -> None:
        st = self.state
        members = wave.nodes()
        if wave.index not in self._failed:
            self._failed[wave.index] = [n for n in members if st.nodes[n].step in FAILURE_STEPS]
        failed = [st.nodes[n] for n in self._failed[wave.index]]
        if wave.index == 0:
            exceeded = len(failed) > st.policy.canary_max_failures
            rule = f"canary_max_failures is {st.policy.canary_max_failures}"
        else:
            exceeded = len(failed) > st.policy.wave_max_failure_fraction * len(members)
            rule = f"more than wave_max_failure_fraction {st.policy.wave_max_failure_fraction:g}"
        if exceeded:
            why = "; ".join(f"{n.name}: {n.failure}" for n in failed[:3]) + ("; ..." if len(failed) > 3 else "")
            self._halt(f"{wave.name}: {len(failed)} of {len(members)} node(s) failed ({why}); {rule}")

    # --- operator requests and stopping -----------------------------------------------------------------------
    def _check_control(self) -> None:
        control = self.store.read_control()
        if control.abort:
            reason = "aborted on request" + (f" ({control.note})" if control.note else "")
            self._begin_stop(Phase.ABORTED, reason, undo=control.abort_rollback)
        if control.pause:
            self._pause("paused on request" + (f" ({control.note})" if control.note else ""))

    def _stop_requested(self) -> bool:
        control = self.store.read_control()
        return control.pause or control.abort

    def _pause(self, reason: str) -> None:
        st = self.state
        self._settle(rollback=False, why="rollout paused")
        st.phase, st.reason = Phase.PAUSED, reason
        st.note(f"paused: {reason}", self.clock())
        self._save()
        self._say(f"paused: {reason}")
        raise _Stop

    def _halt(self, reason: str) -> None:
        self._begin_stop(Phase.HALTED, reason, undo=self.state.policy.rollback_on_halt)

    def _begin_stop(self, outcome: Phase, reason: str, *, undo: bool) -> None:
        st = self.state
        st.phase, st.outcome, st.reason, st.undo_changed = Phase.ROLLING_BACK, outcome, reason, undo
        st.note(f"{outcome.value}: {reason}", self.clock())
        self._save()
        changed = sum(1 for n in st.nodes.values() if n.step == NodeStep.DONE or n.changed)
        self._say(f"{outcome.value}: {reason}" + (f"; rolling back {changed} changed node(s)" if undo else ""))
        raise _Stop

    def _stop(self) -> None:
        """The stopping phase: settle in-flight nodes, roll back changed ones if asked (newest first), then end."""
        st = self.state
        self._settle(rollback=st.undo_changed, why=f"rollout {(st.outcome or Phase.HALTED).value}")
        if st.undo_changed:
            done = sorted((n for n in st.nodes.values() if n.step == NodeStep.DONE), key=lambda n: -n.finished)
            for node in done:
                if self._room() < 1:
                    raise RolloutError(
                        f"rollback of rollout {st.id} waits: max_unavailable {st.max_unavailable} is reached, so "
                        f"{node.name} cannot be taken out; return nodes to service, then `ha-ops rollout resume`"
                    )
                node.undo = True
                self._set(node, NodeStep.DRAINING, "taken out to roll back")
                self._drive(node)
        st.phase = st.outcome or Phase.HALTED
        st.note(f"{st.phase.value}: {st.reason}", self.clock())
        self._save()
        left = [n.name for n in st.nodes.values() if n.step == NodeStep.FAILED]
        self._say(
            f"rollout {st.id} {st.phase.value}: {st.reason}"
            + (f"; out of service, need a person: {_names(left)}" if left else "")
        )

    def _settle(self, *, rollback: bool, why: str) -> None:
        """Bring every in-flight node to rest: untouched ones back to service and pending; changed ones finished,
        or (rollback) switched back."""
        for node in list(self.state.nodes.values()):
            if node.step in TERMINAL_STEPS or node.step == NodeStep.PENDING:
                continue
            if not node.changed and not node.undo and node.step in (NodeStep.DRAINING, NodeStep.DRAINED):
                self._return_untouched(node, NodeStep.PENDING, f"returned untouched: {why}")
            elif rollback and not node.undo and node.step in (NodeStep.APPLYING, NodeStep.APPLIED, NodeStep.VALIDATING):
                node.undo = True
                self._set(node, NodeStep.ROLLING_BACK, why)
            self._drive(node)

    # --- one node ---------------------------------------------------------------------------------------------
    def _wait_for_room(self) -> int:
        """Room to take nodes out; a node just returned counts as out until the scheduler hears from it again
        (Slurm: idle*), so wait for that, as long as a gate would, before pausing the rollout."""
        room = self._room()
        for _ in range(int(self.gate_wait_s / self.gate_poll_s)):
            if room >= 1:
                break
            self.sleep(self.gate_poll_s)
            room = self._room()
        return room

    def _room(self) -> int:
        st = self.state
        fleet = st.fleet()
        out = {name for name in self.scheduler.unavailable() if name in fleet}
        out |= {n.name for n in st.nodes.values() if n.step in OUT_OF_SERVICE_STEPS}
        return st.max_unavailable - len(out)

    def _begin(self, node: NodeState) -> None:
        """Snapshot the node's driver facts, then take it out of service (unless there is nothing to do)."""
        target = self.state.target_version
        try:
            if not self.scheduler.node_healthy(node.name):
                self._skip(node, "out of service or unhealthy before the rollout reached it")
                return
            facts = self.applier.facts(node.name)
        except Exception as exc:
            self._skip(node, f"could not be read before the rollout reached it: {exc}")
            return
        node.before = facts
        if facts.active_version == target:
            self._skip(node, f"already on {target}")
            return
        if self.coordinator is not None:  # the window opens before the drain, or the node is not taken out
            try:
                self.coordinator.begin([node.name], self._window_reason(), MAINTENANCE_TTL_S)
            except Exception as exc:
                self._pause(f"could not open a maintenance window on {node.name} at the remediation controller "
                            f"({exc}); `ha-ops rollout resume` once it answers")  # fmt: skip
            self._announced_now.add(node.name)
        self._count(node, "drain")
        node.began_at = node.began_at or self.clock()
        self._set(node, NodeStep.DRAINING, f"from {facts.active_version or 'unknown'}")
        try:
            self.scheduler.drain(node.name, self._reason())
            self._drain_sent.add(node.name)
        except Exception as exc:
            self._return_untouched(node, NodeStep.SKIPPED, f"drain failed: {exc}")

    def _drive(self, node: NodeState) -> None:
        """Move one node through its steps until it rests (or a stop is requested before its driver changes)."""
        while node.step not in TERMINAL_STEPS and node.step != NodeStep.PENDING:
            step = node.step
            if step == NodeStep.DRAINING:
                self._drain_step(node)
            elif step == NodeStep.DRAINED:
                if node.undo:
                    self._set(node, NodeStep.ROLLING_BACK)
                elif self.state.phase == Phase.RUNNING and self._stop_requested():
                    return  # never start a driver change once a pause or abort is asked for
                else:
                    node.changed = True
                    self._count(node, "apply")
                    self._applying_here.add(node.name)
                    self._set(node, NodeStep.APPLYING, self.state.target_version)
            elif step == NodeStep.APPLYING:
                self._apply_step(node)
            elif step == NodeStep.APPLIED:
                self._set(node, NodeStep.VALIDATING)
            elif step == NodeStep.VALIDATING:
                self._validate_step(node)
            elif step == NodeStep.ROLLING_BACK:
                self._rollback_step(node)
            elif step == NodeStep.RETURNING:
                self._return_step(node)

    def _drain_step(self, node: NodeState) -> None:
        policy = self.state.policy.drain
        try:
            if node.name not in self._drain_sent:  # re-entered after a crash, or a rollback's drain
                self.scheduler.drain(node.name, self._reason())
                self._drain_sent.add(node.name)
            # A rollback does not wait for jobs to finish on a driver under suspicion: it requeues what it may.
            if policy.mode == "requeue" or node.undo:
                self._count(node, "requeue")
                self.scheduler.requeue_jobs(node.name)
            self.scheduler.wait_idle(node.name, policy.timeout_s)
        except WaitTimeout as exc:
            if node.undo:
                self._fail_hard(node, f"could not be emptied for the rollback: {exc}")
            else:
                self._return_untouched(node, NodeStep.SKIPPED, f"jobs still running after {policy.timeout_s:g} s")
            return
        except Exception as exc:
            if node.undo:
                self._fail_hard(node, f"could not be drained for the rollback: {exc}")
            else:
                self._return_untouched(node, NodeStep.SKIPPED, f"drain failed: {exc}")
            return
        self._set(node, NodeStep.DRAINED)

    def _apply_step(self, node: NodeState) -> None:
        target = self.state.target_version
        if node.name not in self._applying_here:
            # Re-entered after a crash: the role may have run. Look before applying again.
            try:
                facts = self.applier.facts(node.name)
            except Exception as exc:
                self._fail(node, f"could not read the node after an interrupted apply: {exc}")
                return
            if facts.active_version == target:
                self._set(node, NodeStep.APPLIED, "found applied after a restart")
                return
            before = node.before
            new_failure = before is None or (facts.last_failure_version, facts.last_failure_reason) != (
                before.last_failure_version,
                before.last_failure_reason,
            )
            if facts.last_failure_version == target and new_failure:
                self._fail(node, f"the role rolled it back: {facts.last_failure_reason or 'validation failed'}")
                return
            self._count(node, "apply")
            self._save()
        self._applying_here.discard(node.name)
        try:
            result = self.applier.apply(node.name, target)
        except Exception as exc:
            self._fail(node, f"apply failed: {exc}")
            return
        if result.ok and result.active_version == target:
            self._set(node, NodeStep.APPLIED, result.message)
        else:
            what = "the role rolled it back" if result.rolled_back else "apply failed"
            self._fail(node, f"{what}: {result.message}")

    def _validate_step(self, node: NodeState) -> None:
        policy = self.state.policy
        self._count(node, "validate")
        try:
            result = self.validator.validate(
                node.name, self.state.target_version, burn_in=policy.burn_in_command is not None
            )
        except Exception as exc:
            result = Validation(False, f"the validation itself failed: {exc}")
        if result.ok:
            node.return_to = NodeStep.DONE
            self._set(node, NodeStep.RETURNING, "validated")
        else:
            self._fail(node, f"validation failed: {result.message}")

    def _rollback_step(self, node: NodeState) -> None:
        target = self.state.target_version
        expected = node.before.active_version if node.before else None
        try:
            facts = self.applier.facts(node.name)
            live = facts.active_version
            if live == target:  # our version is still active: switch back (once: a second call would flip again)
                self._count(node, "rollback")
                self._save()
                result = self.applier.rollback(node.name)
                if not result.ok:
                    raise RuntimeError(result.message)
                live = result.active_version
            if expected is not None and live != expected:
                raise RuntimeError(f"the node runs {live or 'no driver'}, expected {expected}")
            check = self.validator.validate(node.name, live, burn_in=False)
            if not check.ok:
                raise RuntimeError(f"{live or 'the previous driver'} does not validate: {check.message}")
        except Exception as exc:
            self._fail_hard(node, f"rollback failed: {exc}")
            return
        node.return_to = NodeStep.ROLLED_BACK if node.undo else NodeStep.FAILED_ROLLED_BACK
        self._set(node, NodeStep.RETURNING, f"back on {live or 'its previous driver'}")

    def _return_step(self, node: NodeState) -> None:
        self._count(node, "resume")
        try:
            self.scheduler.resume(node.name)
        except Exception as exc:
            self._fail_hard(node, f"could not be returned to service: {exc}")
            return
        to = node.return_to or NodeStep.DONE
        node.return_to = None
        self._drain_sent.discard(node.name)
        if to == NodeStep.DONE:
            self.state.finished += 1
            node.finished = self.state.finished
        if to == NodeStep.PENDING:
            node.undo = False
        self._set(node, to, node.note if to in (NodeStep.PENDING, NodeStep.SKIPPED) else node.failure)

    # --- transitions ------------------------------------------------------------------------------------------
    def _fail(self, node: NodeState, why: str) -> None:
        """The node did not take the new driver: switch it back (if needed) and return it."""
        node.failure = why
        self._set(node, NodeStep.ROLLING_BACK, why)

    def _fail_hard(self, node: NodeState, why: str) -> None:
        """Left out of service for a person: the rollout cannot vouch for this node any more."""
        node.failure = f"{node.failure}; {why}" if node.failure else why
        self._set(node, NodeStep.FAILED, node.failure)

    def _skip(self, node: NodeState, why: str) -> None:
        node.note = why
        self._set(node, NodeStep.SKIPPED, why)

    def _return_untouched(self, node: NodeState, to: NodeStep, why: str) -> None:
        node.note = why
        node.return_to = to
        self._set(node, NodeStep.RETURNING, why)

    def _set(self, node: NodeState, step: NodeStep, detail: str = "") -> None:
        before, node.step = node.step, step
        if step in FAILURE_STEPS:
            self._failed.pop(node.wave, None)
        node.updated_at = self.clock()
        self._save()
        if before != NodeStep.PENDING or step != NodeStep.SKIPPED:  # (a node skipped untouched never had a window)
            self._tell_controller(node, step)
        wave = self.state.waves[node.wave].name if node.wave < len(self.state.waves) else f"wave {node.wave}"
        said = f"[{wave}] {node.name}: {step.value}" + (f" ({detail})" if detail else "")
        if step in TERMINAL_STEPS:  # a node settled: how far the rollout is, and when it should end
            said += f"; {describe(progress(self.state, self.clock()))}"
        self._say(said)

    # --- the remediation controllers (coordination.py) ---------------------------------------------------------
    def _blocked(self) -> str | None:
        if self.coordinator is None:
            return None
        try:
            return self.coordinator.blocked()
        except Exception as exc:
            return f"cannot ask the remediation controllers ({exc})"

    def _refuse_if_blocked(self, st: RolloutState) -> None:
        """Before starting or resuming: RolloutError naming why not, the rollout left paused (resumable)."""
        why = self._blocked()
        if why is None:
            return
        verb = "start" if st.phase == Phase.PLANNED else "resume"
        st.phase, st.reason = Phase.PAUSED, f"refused to {verb}: {why}; `ha-ops rollout resume` once it clears"
        st.note(f"paused: {st.reason}", self.clock())
        self._save()
        raise RolloutError(f"rollout {st.id} refused to {verb}: {why}")

    def _tell_controller(self, node: NodeState, step: NodeStep) -> None:
        """Renew the node's maintenance window at each step, close it when the node rests; a node left for a person
        keeps it (HELD_TTL_S), so the controllers do not repair it meanwhile. A failure is logged: the window ends by
        itself (MAINTENANCE_TTL_S), and the next step tries again."""
        if self.coordinator is None or step == NodeStep.PENDING:
            return
        try:
            if step == NodeStep.FAILED:
                self.coordinator.begin([node.name], f"{self._window_reason()}: failed, left for a person", HELD_TTL_S)
            elif step in TERMINAL_STEPS:
                self.coordinator.end([node.name])
            elif node.name not in self._announced_now:
                self.coordinator.begin([node.name], self._window_reason(), MAINTENANCE_TTL_S)
        except Exception as exc:
            log.warning("%s: could not tell the remediation controller it is %s: %s", node.name, step.value, exc)
        finally:
            self._announced_now.discard(node.name)

    def _window_reason(self) -> str:
        return f"driver rollout {self.state.id} to {self.state.target_version}"

    def _count(self, node: NodeState, action: str) -> None:
        node.attempts[action] = node.attempts.get(action, 0) + 1

    def _save(self) -> None:
        self.state.updated_at = self.clock()
        self.store.save(self.state)

    def _reason(self) -> str:
        return f"{DRAIN_REASON_PREFIX} driver {self.state.target_version} ({self.state.id})"

    def _say(self, line: str) -> None:
        self.progress(line)


def _names(names: list[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
