"""Driver rollouts: a pure plan (canary, waves, batches), a persisted per-node state machine, and an executor that
talks to the world through three protocols (scheduler, driver applier, validator). See docs/architecture.md."""

from ha_ops.rollout.plan import FleetNode, Plan, Wave, plan_rollout
from ha_ops.rollout.policy import DrainPolicy, RolloutPolicy, build_policy
from ha_ops.rollout.protocols import ApplyResult, DriverApplier, DriverFacts, Scheduler, Validation, Validator
from ha_ops.rollout.state import NodeStep, Phase, RolloutError, RolloutState, RolloutStore

__all__ = [
    "ApplyResult",
    "DrainPolicy",
    "DriverApplier",
    "DriverFacts",
    "FleetNode",
    "NodeStep",
    "Phase",
    "Plan",
    "RolloutError",
    "RolloutPolicy",
    "RolloutState",
    "RolloutStore",
    "Scheduler",
    "Validation",
    "Validator",
    "Wave",
    "build_policy",
    "plan_rollout",
]
