"""The gpu_driver role and node checks through ansible-runner: AnsibleDriverApplier and AnsibleValidator.

Every call is one `ansible_runner.run()` limited to one node, using the inventory `ha-ops inventory --spec` renders
(so addresses, users and become settings come from where every playbook takes them). Each run gets its own ident
under `private_data_dir/artifacts` (the last `keep_artifacts` are kept, for post-mortems).

How the driver state is read back: after the playbook, and whenever the executor needs a snapshot, an ad-hoc
`ansible.builtin.slurp` of the role's fact file: the host's gpu_driver_fact_file when the inventory sets one (Ansible
templates the ad-hoc arguments per host), else the role's default /etc/ansible/facts.d/gpu_driver.fact.
It is read-only, reads exactly the JSON the role wrote (whatever `fact_path` the site set for `setup`), and works the
same after a failed play, where a runner fact cache would hold whatever the play last gathered.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ha_ops.errors import TransportError
from ha_ops.rollout.protocols import ApplyResult, DriverFacts, Validation
from ha_ops.shipped import shipped

DEFAULT_PLAYBOOK = shipped("playbooks", "driver-rollout.yml")
DEFAULT_FACT_FILE = "{{ gpu_driver_fact_file | default('/etc/ansible/facts.d/gpu_driver.fact') }}"
DEFAULT_HEALTH_COMMAND = "ha-ops health check --json"
DEFAULT_VERSION_COMMAND = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"


@dataclass(frozen=True)
class TaskResult:
    """One runner invocation, as seen from its one host."""

    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    ok: bool
    unreachable: bool
    res: dict[str, Any] = field(default_factory=dict)  # the last module result for the host (ad-hoc: the only one)
    message: str = ""  # the first failure's message, or the status


def _default_run(**kwargs: Any) -> Any:
    import ansible_runner  # a dev/operator dependency: imported only when a rollout really runs

    return ansible_runner.run(**kwargs)


def _host_events(events: Iterable[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    wanted = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped")
    return [e for e in events if e.get("event") in wanted and (e.get("event_data") or {}).get("host") == node]


class AnsibleRunner:
    def __init__(
        self,
        inventory: Path,
        private_data_dir: Path,
        *,
        roles_path: Path | None = None,
        cmdline: str | None = None,
        keep_artifacts: int = 200,
        run: Callable[..., Any] = _default_run,
    ) -> None:
        # ansible-runner reads relative paths against private_data_dir/inventory and private_data_dir/project.
        self.inventory = Path(inventory).resolve()
        self.private_data_dir = Path(private_data_dir).resolve()
        self.roles_path = roles_path
        self.cmdline = cmdline  # extra ansible options, e.g. "--become"
        self.keep_artifacts = keep_artifacts
        self._run = run

    def _common(self, node: str, what: str, timeout_s: float) -> dict[str, Any]:
        self.private_data_dir.mkdir(parents=True, exist_ok=True)
        # ansible-runner starts the `ansible` commands by name: find the ones installed beside ha-ops first, also
        # where the caller's PATH does not name this environment (a service, `ssh node ha-ops ...`).
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)])
        envvars = {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0", "PATH": path,
                   # One SSH round trip per task instead of four (measured in the lab: a driver install on one node
                   # 19 s -> 12 s). Off only where sudo insists on a tty (`requiretty`): set ANSIBLE_PIPELINING=False.
                   "ANSIBLE_PIPELINING": os.environ.get("ANSIBLE_PIPELINING", "True")}  # fmt: skip
        if self.roles_path is not None:
            envvars["ANSIBLE_ROLES_PATH"] = str(self.roles_path)
        kwargs: dict[str, Any] = {
            "private_data_dir": str(self.private_data_dir),
            "inventory": str(self.inventory),
            "ident": f"{node}-{what}-{uuid.uuid4().hex[:8]}",
            "envvars": envvars,
            "quiet": True,
            "timeout": int(timeout_s),
            "rotate_artifacts": self.keep_artifacts,
            # Otherwise ansible-runner writes the first run's extravars and envvars to private_data_dir/env/, keeps
            # that file, and merges it into every later run: an install's gpu_driver_version leaks into a rollback.
            "suppress_env_files": True,
        }
        if self.cmdline:
            kwargs["cmdline"] = self.cmdline
        return kwargs

    def playbook_kwargs(self, playbook: Path, node: str, extravars: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        return {
            **self._common(node, extravars.get("gpu_driver_action", "play"), timeout_s),
            "playbook": str(playbook),
            "project_dir": str(Path(playbook).parent),
            "limit": node,
            "extravars": dict(extravars),
        }

    def module_kwargs(self, node: str, module: str, args: str, timeout_s: float) -> dict[str, Any]:
        return {
            **self._common(node, module.rsplit(".", 1)[-1], timeout_s),
            "host_pattern": node,
            "module": module,
            "module_args": args,
        }

    def playbook(self, playbook: Path, node: str, extravars: dict[str, Any], timeout_s: float) -> TaskResult:
        return self._result(self._run(**self.playbook_kwargs(playbook, node, extravars, timeout_s)), node)

    def module(self, node: str, module: str, args: str, timeout_s: float) -> TaskResult:
        return self._result(self._run(**self.module_kwargs(node, module, args, timeout_s)), node)

    @staticmethod
    def _result(runner: Any, node: str) -> TaskResult:
        status, rc = str(getattr(runner, "status", "failed")), int(getattr(runner, "rc", 1) or 0)
        events = _host_events(getattr(runner, "events", []) or [], node)
        unreachable = any(e["event"] == "runner_on_unreachable" for e in events)
        failed = [e for e in events if e["event"] in ("runner_on_failed", "runner_on_unreachable")]
        last = events[-1]["event_data"].get("res", {}) if events else {}
        message = ""
        if failed:
            res = failed[0]["event_data"].get("res", {})
            message = str(res.get("msg") or res.get("stderr") or "").strip()
        ok = status == "successful" and rc == 0 and not failed and bool(events)
        if not ok and not message:
            missing = f"; no result for {node} (not in the inventory, or a playbook error)"
            message = f"ansible-runner {status} (rc {rc})" + ("" if events else missing)
        return TaskResult(status, rc, ok, unreachable, dict(last), message)


class AnsibleDriverApplier:
    """playbooks/driver-rollout.yml with --limit NODE; gpu_driver_action install|rollback."""

    def __init__(
        self,
        runner: AnsibleRunner,
        playbook: Path = DEFAULT_PLAYBOOK,
        *,
        fact_file: str = DEFAULT_FACT_FILE,
        extravars: dict[str, Any] | None = None,
        timeout_s: float = 3600.0,
        facts_timeout_s: float = 120.0,
    ) -> None:
        self.runner = runner
        self.playbook = Path(playbook)
        self.fact_file = fact_file
        self.extravars = dict(extravars or {})
        self.timeout_s = timeout_s
        self.facts_timeout_s = facts_timeout_s

    def facts(self, node: str) -> DriverFacts:
        result = self.runner.module(node, "ansible.builtin.slurp", f"src={self.fact_file}", self.facts_timeout_s)
        if result.unreachable:
            raise TransportError(f"{node} unreachable through Ansible: {result.message}")
        if not result.ok:
            if "not found" in result.message.lower() or "no such file" in result.message.lower():
                return DriverFacts()  # the role never ran here
            raise TransportError(f"reading {self.fact_file} on {node}: {result.message}")
        try:
            data = json.loads(base64.b64decode(result.res["content"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise TransportError(f"{self.fact_file} on {node} is not the role's JSON fact ({exc})") from None
        failure = data.get("last_failure") or {}
        return DriverFacts(
            active_version=data.get("active_version"),
            previous_version=data.get("previous_version"),
            last_failure_version=failure.get("version"),
            last_failure_reason=failure.get("reason"),
        )

    def _play(self, node: str, extravars: dict[str, Any]) -> TaskResult:
        result = self.runner.playbook(self.playbook, node, {**self.extravars, **extravars}, self.timeout_s)
        if result.unreachable:
            raise TransportError(f"{node} unreachable through Ansible: {result.message}")
        return result

    def apply(self, node: str, version: str) -> ApplyResult:
        result = self._play(node, {"gpu_driver_action": "install", "gpu_driver_version": version})
        facts = self.facts(node)
        ok = result.ok and facts.active_version == version
        rolled_back = not ok and facts.last_failure_version == version and facts.active_version != version
        message = f"active {version}" if ok else result.message or f"the node runs {facts.active_version}"
        return ApplyResult(ok, rolled_back, facts.active_version, message)

    def rollback(self, node: str) -> ApplyResult:
        result = self._play(node, {"gpu_driver_action": "rollback"})
        facts = self.facts(node)
        message = f"back on {facts.active_version}" if result.ok else result.message
        return ApplyResult(result.ok, False, facts.active_version, message)


class AnsibleValidator:
    """Health check, driver version read from the GPUs, optional burn-in: ad-hoc `ansible.builtin.command`s."""

    def __init__(
        self,
        runner: AnsibleRunner,
        *,
        health_command: str = DEFAULT_HEALTH_COMMAND,
        version_command: str = DEFAULT_VERSION_COMMAND,
        burn_in_command: str | None = None,
        burn_in_timeout_s: float = 1800.0,
        timeout_s: float = 120.0,
    ) -> None:
        self.runner = runner
        self.health_command = health_command
        self.version_command = version_command
        self.burn_in_command = burn_in_command
        self.burn_in_timeout_s = burn_in_timeout_s
        self.timeout_s = timeout_s

    def _command(self, node: str, command: str, timeout_s: float) -> TaskResult:
        result = self.runner.module(node, "ansible.builtin.command", command, timeout_s)
        if result.unreachable:
            raise TransportError(f"{node} unreachable through Ansible: {result.message}")
        return result

    def validate(self, node: str, version: str | None, *, burn_in: bool) -> Validation:
        health = self._command(node, self.health_command, self.timeout_s)
        if not health.ok:
            return Validation(False, f"health check: {_said(health)}")
        driver: str | None = None
        if version is not None:
            read = self._command(node, self.version_command, self.timeout_s)
            lines = [line.strip() for line in str(read.res.get("stdout", "")).splitlines() if line.strip()]
            driver = lines[0] if len(set(lines)) == 1 else None
            if not read.ok or not lines or set(lines) != {version}:
                seen = ", ".join(sorted(set(lines))) or _said(read)
                return Validation(False, f"GPUs report {seen}, expected {version}", driver)
        if burn_in and self.burn_in_command:
            run = self._command(node, self.burn_in_command, self.burn_in_timeout_s)
            if not run.ok:
                return Validation(False, f"burn-in: {_said(run)}", driver)
        return Validation(True, "healthy" + (f", GPUs on {version}" if version else ""), driver)


def _said(result: TaskResult) -> str:
    res = result.res
    text = str(res.get("stderr") or res.get("stdout") or result.message or "").strip().splitlines()
    tail = text[-1][:200] if text else result.message
    rc = res.get("rc", result.rc)
    return f"exit {rc}: {tail}" if tail else f"exit {rc}"
