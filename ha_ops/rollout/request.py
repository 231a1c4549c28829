"""A rollout as asked for: its policy (a policy file, overridden by flags, each problem named under the flag the
user typed), the fleet from the cluster spec with what is known of it now, the plan, and the remediation controllers
to coordinate with. The CLI (cli/rollout.py) parses the flags into a PlanRequest and renders what comes back."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ha_ops.errors import SpecError
from ha_ops.rollout.inputs import RolloutInputs
from ha_ops.rollout.plan import FleetNode, Plan, plan_rollout
from ha_ops.rollout.policy import RolloutPolicy, build_policy
from ha_ops.spec import compute_layout, load_spec
from ha_ops.util.parsing import parse_yaml, read_text
from ha_ops.util.yamlconfig import load_model

# Policy field -> the flag that sets it, so that a bad value is reported under the name the user typed.
FLAGS = {
    "to": "--to",
    "canary": "--canary",
    "waves": "--waves",
    "max_unavailable": "--max-unavailable",
    "skip": "--skip",
    "drain": "--drain",
    "canary_max_failures": "--canary-max-failures",
    "wave_max_failure_fraction": "--wave-max-failure-fraction",
    "soak_s": "--soak",
    "burn_in_command": "--burn-in",
    "burn_in_timeout_s": "--burn-in-timeout",
    "rollback_on_halt": "--rollback-on-halt",
}
_SUBFLAGS = {"drain.mode": "--drain", "drain.timeout_s": "--drain-timeout"}


@dataclass(frozen=True)
class PlanRequest:
    """The flags `rollout plan driver` and `rollout driver` share (None: not given; the policy file or the
    default decides)."""

    policy_file: Path | None = None
    canary: str | None = None
    waves: str | None = None
    max_unavailable: str | None = None
    skip: str | None = None
    drain: str | None = None
    drain_timeout: float | None = None
    canary_max_failures: int | None = None
    wave_max_failure_fraction: float | None = None
    soak: float | None = None
    burn_in: str | None = None
    burn_in_timeout: float | None = None
    rollback_on_halt: bool | None = None
    down: str | None = None
    node_data: Path | None = None
    from_version: str | None = None

    def policy_fields(self) -> dict[str, Any]:
        """Policy fields from the flags (None: not given)."""
        return {
            "canary": self.canary,
            "waves": names(self.waves) if self.waves is not None else None,
            "max_unavailable": self.max_unavailable,
            "skip": names(self.skip) if self.skip is not None else None,
            "drain": self.drain,
            "drain_timeout": self.drain_timeout,
            "canary_max_failures": self.canary_max_failures,
            "wave_max_failure_fraction": self.wave_max_failure_fraction,
            "soak_s": self.soak,
            "burn_in_command": self.burn_in,
            "burn_in_timeout_s": self.burn_in_timeout,
            "rollback_on_halt": self.rollback_on_halt,
        }


class NodeData(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    driver_version: str | None = None
    running_jobs: int = Field(default=0, ge=0)
    criticality: int = 0
    down: bool = False


class NodeDataFile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    nodes: dict[str, NodeData] = Field(default_factory=dict)


def names(text: str | None) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def _flagged(problems: list[str], given: set[str]) -> list[str]:
    """'max_unavailable: ...' -> '--max-unavailable: ...' for fields set by a flag."""
    out = []
    for problem in problems:
        key, sep, message = problem.partition(": ")
        base = re.split(r"[\[]", key, maxsplit=1)[0]
        flag = _SUBFLAGS.get(base) or FLAGS.get(base.split(".", 1)[0])
        if sep and flag and (base.split(".", 1)[0] in given or base == "to"):
            out.append(f"{flag}: {message}" if key == base else f"{flag} ({key}): {message}")
        else:
            out.append(problem)
    return out


def policy_from(policy_file: Path | None, flags: dict[str, Any]) -> tuple[RolloutPolicy, set[str], str]:
    """The policy, the fields the flags set, and where it came from (for messages)."""
    data: dict[str, Any] = {}
    if policy_file is not None:
        # Through the project's safe reading: bad UTF-8, an impossible date, a huge integer or deep nesting is an
        # error naming the file, never a traceback.
        loaded = parse_yaml(read_text(policy_file), str(policy_file)) or {}
        if not isinstance(loaded, dict):
            raise SpecError(str(policy_file), ["the top level must be a mapping of policy fields"])
        data = loaded
    given = {k for k, v in flags.items() if v is not None}
    source = str(policy_file) if policy_file is not None else "rollout flags"
    if {"drain", "drain_timeout"} & given and not isinstance(data.get("drain", {}), dict):
        raise SpecError(source, [f"drain: a mapping of mode and timeout_s, not {data['drain']!r:.50}"])
    for key in given:
        if key == "drain_timeout":
            data["drain"] = {**data.get("drain", {}), "timeout_s": flags[key]}
        elif key == "drain":
            data["drain"] = {**data.get("drain", {}), "mode": flags[key]}
        else:
            data[key] = flags[key]
    if "drain_timeout" in given:
        given.add("drain")
    try:
        return build_policy(data, source), given, source
    except SpecError as exc:
        raise SpecError(source, _flagged(exc.problems, given)) from None
    except RecursionError:
        raise SpecError(source, ["nested too deeply"]) from None


def fleet_from_spec(
    spec_file: Path, down: list[str], node_data: Path | None, from_version: str | None
) -> list[FleetNode]:
    """The spec's GPU nodes with what is known about them now."""
    spec = load_spec(spec_file)
    gpu_nodes = [n for n in compute_layout(spec).nodes if "gpu" in n.roles]
    known = {n.name for n in gpu_nodes}
    data = load_model(node_data, NodeDataFile).nodes if node_data is not None else {}
    problems = [f"--down: {n!r} is not a GPU node of {spec_file}" for n in down if n not in known]
    problems += [f"--node-data: {n!r} is not a GPU node of {spec_file}" for n in data if n not in known]
    if problems:
        raise SpecError("rollout flags", problems)
    fleet = []
    for node in gpu_nodes:
        info = data.get(node.name, NodeData())
        fleet.append(
            FleetNode(
                name=node.name,
                domain=node.domain,
                zone=spec.domain(node.domain).zone,
                spare=node.spare,
                down=info.down or node.name in down,
                running_jobs=info.running_jobs,
                criticality=info.criticality,
                driver_version=info.driver_version or from_version,
            )
        )
    return fleet


def plan_for(to: str, spec_file: Path, request: PlanRequest) -> tuple[Plan, RolloutPolicy, list[FleetNode]]:
    policy, given, source = policy_from(request.policy_file, request.policy_fields())
    fleet = fleet_from_spec(spec_file, names(request.down), request.node_data, request.from_version)
    try:
        return plan_rollout(fleet, policy, to), policy, fleet
    except SpecError as exc:
        raise SpecError(source, _flagged(exc.problems, given)) from None


def controller_inputs(
    spec_file: Path, urls: list[str], none: bool, cert: Path | None, key: Path | None, ca: Path | None
) -> dict[str, Any]:
    """RolloutInputs' controller fields: --controller URLs (default: the spec's controllers), and the operator
    certificate for https ones. Problems named under their flags."""
    from ha_ops.remediation.client import urls_from_spec

    if none:
        return {}
    spec = load_spec(spec_file)
    urls = urls or urls_from_spec(spec, compute_layout(spec))
    problems = [f"--controller: {u!r} is not an http:// or https:// URL" for u in urls
                if not re.match(r"https?://[^/\s]+/?$", u)]  # fmt: skip
    given = {"--controller-cert": cert, "--controller-key": key, "--controller-ca": ca}
    if any(given.values()) and not all(given.values()):
        problems.append(f"{', '.join(k for k, v in given.items() if v is None)}: give all three, or none")
    problems += [f"{flag}: {path} does not exist" for flag, path in given.items() if path and not path.is_file()]
    if any(u.startswith("https://") for u in urls) and not all(given.values()):
        problems.append("--controller-cert: the controllers serve https: give an operator certificate, key and CA")
    if problems:
        raise SpecError("rollout flags", problems)
    fields: dict[str, Any] = {"controllers": list(urls)}
    if cert and key and ca:
        fields |= {"controller_cert": cert.resolve(), "controller_key": key.resolve(), "controller_ca": ca.resolve()}
    return fields


def rollout_inputs(
    spec_file: Path,
    inventory: Path,
    playbook: Path,
    health_command: str,
    version_command: str,
    coordination: dict[str, Any],
) -> RolloutInputs:
    """What the rollout runs with (kept in its state, for `resume`); files that do not exist named by flag."""
    problems = [f"{flag}: {path} does not exist" for flag, path in (("--inventory", inventory),
                ("--playbook", playbook)) if not path.is_file()]  # fmt: skip
    if problems:
        raise SpecError("rollout flags", problems)
    return RolloutInputs(spec=spec_file.resolve(), inventory=inventory.resolve(), playbook=playbook.resolve(),
                         health_command=health_command, version_command=version_command,
                         **coordination)  # fmt: skip
