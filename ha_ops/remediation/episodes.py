"""An episode of a node out of service (policy.py decides when one begins): taking it out through the safety gate,
the repair ladder's rungs and their validations, lemons held for replacement, spares in and out, and a person's word
that it was repaired. No I/O."""

from __future__ import annotations

from typing import Any

from ha_ops.remediation import history
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.decisions import Outcome, free_spares, make_intent, recent_returns, set_phase, starting_rung
from ha_ops.remediation.model import (
    OUT_OF_SERVICE,
    ControllerState,
    Intent,
    NodePhase,
    NodeRecord,
    Rung,
)
from ha_ops.remediation.observers import NO_VIEW, NodeView
from ha_ops.remediation.safety import gate_cordon
from ha_ops.schedulers.base import AGENT_REASON_PREFIX


def take_out_of_service(
    state: ControllerState,
    rec: NodeRecord,
    reason: str,
    action: str,
    gpus: list[int],
    config: ControllerConfig,
    now: float,
    token: int,
    lost: bool = False,
    jobs: tuple[str, ...] = (),
) -> Outcome:
    if rec.phase.out_of_service:
        return Outcome(notes=[f"{rec.name} is already {rec.phase.value}"])
    spares: list[NodeRecord] = []
    looked = False

    def count_spares() -> int:
        nonlocal looked
        if not looked:  # (once: a scan of the pool)
            spares.extend(free_spares(state, rec.pool) if rec.in_main else [])
            looked = True
        return len(spares)

    gate = gate_cordon(state, rec, config.safety, now, count_spares)
    if gate.outcome != "allow":
        if gate.trips_breaker and not state.breaker.open:
            state.breaker.open, state.breaker.reason, state.breaker.opened_at = True, gate.why, now
        if gate.outcome == "defer":
            state.deferred[rec.name] = gate.why
        return Outcome(ignored=f"{rec.name} not cordoned: {gate.why}")
    state.deferred.pop(rec.name, None)
    flap = rec.phase == NodePhase.RETURNED or bool(recent_returns(rec, config, now))
    rung = starting_rung(rec, action, config, now)
    rec.episode += 1
    cause = history.cause_of(reason, lost, flap)
    history.record_start(rec, cause, reason, now, "drain", config.fleet.max_incidents_per_node)
    rec.rung, rec.rung_started = rung, 0.0
    set_phase(rec, NodePhase.CORDONED, now, reason)
    rec.gpus = list(gpus)
    state.breaker.cordons.append((now, rec.name))
    out = Outcome()
    out.intents.append(make_intent(state, rec, "drain", reason, now, token, **({"lost": True} if lost else {})))
    covered: NodeRecord | None = rec
    if rec.spare:
        # A failing stand-in stands in for nobody: the node it covered (if still out) gets another spare, and no
        # spare stands in for a spare (else it stays in service after that node is back, and the node goes uncovered).
        covered = state.nodes.get(rec.spare_for) if rec.spare_for else None
        rec.spare_for = None
        if covered is not None and not covered.phase.out_of_service:
            covered = None
    if covered is not None:
        count_spares()
    if covered is not None and spares:
        bring_in_spare(state, spares[0], covered, now, token, out)
    release: dict[str, Any] = {}
    if lost:
        # Fence before the work moves: power-cycle the lost node (it may only be cut off, its jobs still running),
        # then release the jobs Slurm requeued from it (Slurm would hold them for cred_expire) - only if the fence
        # succeeded, which the controller checks before it runs the requeue.
        fence = make_intent(state, rec, "reboot_node", f"fence: {reason}", now, token, rung=rung.value)
        out.intents.append(fence)
        history.note_action(rec, "fence")
        release = {"release": list(jobs), "fence": fence.id} if jobs else {}
    out.intents.append(
        make_intent(state, rec, "requeue_jobs", f"{rec.name} left service: {reason}", now, token, **release)
    )
    return out


def episode_done(state: ControllerState, rec: NodeRecord, kind: str) -> Intent | None:
    for intent in reversed(state.intents):
        if intent.node == rec.name and intent.kind == kind and intent.args.get("episode") == rec.episode:
            return intent if intent.status in ("done", "skipped", "failed") else None
    return None


def episode_has(state: ControllerState, rec: NodeRecord, kind: str, **match: Any) -> bool:
    return any(
        i.node == rec.name
        and i.kind == kind
        and i.args.get("episode") == rec.episode
        and all(i.args.get(k) == v for k, v in match.items())
        for i in state.intents
    )


def start_rung(state: ControllerState, rec: NodeRecord, rung: Rung, now: float, token: int, out: Outcome) -> None:
    rec.rung, rec.rung_started = rung, now
    if rung == Rung.REPLACE:
        set_phase(rec, NodePhase.AWAITING_REPAIR, now, f"needs replacement: {rec.reason}")
        history.close(rec, "held for replacement", now, "replace")
        out.notes.append(f"{rec.name} needs replacement; it stays out of service until reported repaired")
        return
    set_phase(rec, NodePhase.AWAITING_REPAIR, now)
    gpus = rec.gpus or (rec.last_report.gpus if rec.last_report else [])  # (a state written before `gpus`)
    if rung == Rung.RESET_GPU:
        out.intents.append(
            make_intent(state, rec, "reset_gpu", rec.reason, now, token, gpus=gpus or [0], rung=rung.value)
        )
        history.note_action(rec, rung.value)
    elif not episode_has(state, rec, "reboot_node", rung=rung.value):  # a lost node was power-cycled as its fence
        out.intents.append(make_intent(state, rec, "reboot_node", rec.reason, now, token, rung=rung.value))
        history.note_action(rec, rung.value)
    out.intents.append(make_intent(state, rec, "validate", f"after {rung.value}", now, token, rung=rung.value))


def agent_drained(view: NodeView, rec: NodeRecord) -> bool:
    """Drained by its agent (fallback: no controller accepted its report) after this controller last changed the
    node's phase: a drain to adopt. A poll that began before the node's last change may predate the controller's own
    resume, so it does not count."""
    return "drain" in view.state.lower() and view.reason.startswith(AGENT_REASON_PREFIX) and rec.since < view.polled_at


def current_validation(state: ControllerState, rec: NodeRecord) -> Intent | None:
    rung = rec.rung.value if rec.rung else None
    for intent in reversed(state.intents):
        if (
            intent.node == rec.name
            and intent.kind == "validate"
            and intent.args.get("episode") == rec.episode
            and intent.args.get("rung") == rung
        ):
            return intent
    return None


def follow_repair(
    state: ControllerState, rec: NodeRecord, config: ControllerConfig, now: float, token: int, out: Outcome
) -> None:
    assert rec.rung is not None
    validation = current_validation(state, rec)
    if validation is not None and validation.status != "pending":
        if validation.status in ("done", "skipped") and validation.result == "pass":
            if episode_has(state, rec, "resume"):
                return
            lemon = history.lemon_reason(rec, config.lemon, now)
            if lemon is not None:
                hold_lemon(rec, lemon, now, out)
                return
            out.intents.append(make_intent(state, rec, "resume", f"validated after {rec.rung.value}", now, token))
            return
        out.notes.append(f"{rec.name}: {rec.rung.value} did not fix it ({validation.result}); climbing the ladder")
        start_rung(state, rec, rec.rung.next(), now, token, out)
    elif now - rec.rung_started > config.ladder.validate_timeout_s and not carried_out(state, rec, token):
        out.notes.append(f"{rec.name}: {rec.rung.value} did not validate in time; climbing the ladder")
        start_rung(state, rec, rec.rung.next(), now, token, out)


def carried_out(state: ControllerState, rec: NodeRecord, token: int) -> bool:
    """Whether this term's action pipeline is carrying out one of the node's intents now (a reset, a reboot, a
    validation waiting for a boot): its rung's time runs out only once it has ended."""
    return any(i.running == token for i in state.node_intents(rec.name, status="pending"))


def hold_lemon(rec: NodeRecord, why: str, now: float, out: Outcome) -> None:
    """The episode would end with a return, but the node is a lemon: held for replacement instead (still drained; a
    person replaces the part and reports it repaired, `ha-ops controller repaired`)."""
    rec.rung, rec.rung_started = Rung.REPLACE, now
    set_phase(rec, NodePhase.AWAITING_REPAIR, now, why)
    history.close(rec, "held for replacement (lemon)", now, "replace")
    out.notes.append(f"{rec.name} is a {why}; held for replacement instead of being returned")


def manage_spares(state: ControllerState, views: dict[str, NodeView], now: float, token: int, out: Outcome) -> None:
    def pending(node: str) -> bool:
        return any(
            i.node == node and i.kind in ("spare_in", "spare_out") and i.status == "pending" for i in state.intents
        )

    for spare in state.nodes.values():
        if not spare.spare or not spare.in_main or spare.phase.out_of_service or pending(spare.name):
            continue
        covered = state.nodes.get(spare.spare_for) if spare.spare_for else None
        still_needed = covered is not None and covered.phase.out_of_service
        if not still_needed and not views.get(spare.name, NO_VIEW).jobs:
            why = f"{spare.spare_for} is back in service" if spare.spare_for else "no node needs a stand-in"
            spare.in_main, spare.spare_for = False, None
            out.intents.append(make_intent(state, spare, "spare_out", why, now, token))
    # A node out of service without a stand-in gets one as soon as a spare is free. (Who is covered, and each pool's
    # free spares, found once: a storm puts 150 of 1,500 nodes out of service at once.)
    covered = {s.spare_for for s in state.nodes.values() if s.spare and s.in_main and s.spare_for}
    free: dict[str, list[NodeRecord]] = {}
    for rec in state.nodes.values():
        if rec.phase not in OUT_OF_SERVICE or rec.spare or not rec.in_main or rec.name in covered:
            continue
        if rec.pool not in free:
            free[rec.pool] = free_spares(state, rec.pool)
        spares = free[rec.pool]
        if spares:
            bring_in_spare(state, spares.pop(0), rec, now, token, out)


def bring_in_spare(
    state: ControllerState, spare: NodeRecord, rec: NodeRecord, now: float, token: int, out: Outcome
) -> None:
    spare.in_main, spare.spare_for = True, rec.name
    out.intents.append(
        make_intent(state, spare, "spare_in", f"stands in for {rec.name}", now, token, replaces=rec.name)
    )


def repaired(state: ControllerState, node: str, now: float, token: int, by: str = "an operator") -> Outcome:
    """A person (`by`: the operator's identity, for the audit) reports a node repaired (replaced): validate it,
    then return it to service."""
    rec = state.nodes.get(node)
    if rec is None:
        return Outcome(ignored=f"unknown node {node!r}")
    if rec.phase != NodePhase.AWAITING_REPAIR:
        return Outcome(ignored=f"{node} is {rec.phase.value}, not awaiting repair")
    rec.rung, rec.rung_started, rec.returns = Rung.REBOOT_NODE, now, []
    rec.repaired_at = now  # lemon and tier counts start afresh (the history stays)
    out = Outcome(notes=[f"{node} reported repaired; validating"])
    out.intents.append(
        make_intent(state, rec, "validate", f"reported repaired by {by}", now, token, rung=Rung.REBOOT_NODE.value)
    )
    return out
