"""The Pulumi engine, offline. The CLI, its Python language host and the Kubernetes provider are the ones
scripts/tools.sh built (no download site is reachable); state goes to a local file backend; secrets are encrypted
with a passphrase kept in a 0600 file beside the state; the plugins are installed into PULUMI_HOME from the built
binaries, and PULUMI_HOME is private to the backend, so the CLI never looks for a plugin anywhere else."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ha_ops.errors import HaOpsError
from ha_ops.util.proc import CommandResult, run
from ha_ops.util.tools import TOOLS_BIN, tool

# The plugins and the versions they are installed as: what the Python SDKs ask the engine for.
PLUGINS = {
    ("resource", "kubernetes"): ("4.25.0", "pulumi-resource-kubernetes"),
}


class PulumiError(HaOpsError):
    pass


class PulumiEngine:
    """`pulumi` with a file backend in `state_dir` (created on first use)."""

    def __init__(self, state_dir: Path, *, progress: Callable[[str], None] | None = None) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.home = self.state_dir / ".pulumi-home"
        self.passphrase_file = self.state_dir / ".passphrase"
        self.progress = progress or (lambda _line: None)
        self._workdirs: dict[Path, Path] = {}

    # --- environment ------------------------------------------------------------------------------------------
    def binary(self) -> Path:
        return tool("pulumi")

    def env(self) -> dict[str, str]:
        path = os.pathsep.join([str(TOOLS_BIN), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        return {
            **os.environ,
            "PATH": path,  # the language host and its exec shim, the dynamic provider's shim, this Python
            "PULUMI_HOME": str(self.home),
            "PULUMI_BACKEND_URL": f"file://{self.state_dir}",
            "PULUMI_CONFIG_PASSPHRASE_FILE": str(self.passphrase_file),
            "PULUMI_PYTHON_CMD": sys.executable,  # programs and dynamic providers run with ha-ops importable
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "true",
            "PULUMI_SUPPRESS_COPILOT_LINK": "true",
            "NO_COLOR": "1",
        }

    def prepare(self) -> None:
        """The backend folder, the passphrase and the plugins; idempotent."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if not self.passphrase_file.exists():
            fd = os.open(self.passphrase_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
        for (kind, name), (version, binary) in PLUGINS.items():
            installed = self.home / "plugins" / f"{kind}-{name}-v{version}" / binary
            if not installed.exists():
                source = tool(binary)
                self.progress(f"installing the {kind} plugin {name} {version} from {source}")
                self.pulumi(["plugin", "install", kind, name, version, "--file", str(source.resolve())], project=None)

    def workdir(self, project: Path) -> Path:
        """The program copied beside the state, where the CLI writes the stack's settings (Pulumi.<stack>.yaml,
        with the passphrase's salt): the program's own folder stays untouched, and one program can be driven by
        several backends."""
        project = Path(project).resolve()
        if project in self._workdirs:  # copied once per engine: every command of a run sees the same program
            return self._workdirs[project]
        work = self.state_dir / "programs" / project.name
        work.mkdir(parents=True, exist_ok=True)
        for source in project.iterdir():
            if source.is_file() and not (source.name.startswith("Pulumi.") and source.name != "Pulumi.yaml"):
                shutil.copy2(source, work / source.name)
        self._workdirs[project] = work
        return work

    # --- commands ---------------------------------------------------------------------------------------------
    def pulumi(
        self, args: list[str], *, project: Path | None, timeout: float = 600.0, check: bool = True
    ) -> CommandResult:
        argv = [str(self.binary()), *args, "--non-interactive"]
        where = self.workdir(project) if project is not None else None
        result = run(argv, timeout=timeout, check=False, env=self.env(), cwd=where)
        if check and not result.ok:
            what = " ".join(args[:2])
            raise PulumiError(f"pulumi {what} failed (exit {result.returncode}): {_tail(result)}")
        return result

    def select_stack(self, project: Path, stack: str) -> None:
        """Select `stack` of the program in `project`, creating it on first use."""
        self.prepare()
        if not self.pulumi(["stack", "select", stack], project=project, check=False).ok:
            self.pulumi(["stack", "init", stack], project=project)

    def set_config(
        self, project: Path, stack: str, values: dict[str, str], secret: frozenset[str] = frozenset()
    ) -> None:
        for key, value in values.items():
            extra = ["--secret"] if key in secret else []
            self.pulumi(["config", "set", "--stack", stack, key, value, *extra], project=project)

    def up(self, project: Path, stack: str, timeout: float = 1800.0) -> dict[str, Any]:
        """`pulumi up --yes`; returns the summary of the update (its resource changes)."""
        self.select_stack(project, stack)
        self.pulumi(
            ["up", "--yes", "--stack", stack, "--skip-preview", "--suppress-progress"], project=project, timeout=timeout
        )
        return self.last_update(project, stack)

    def preview(self, project: Path, stack: str, timeout: float = 1800.0) -> dict[str, Any]:
        """`pulumi preview --json`: the steps an `up` would take and their counts."""
        self.select_stack(project, stack)
        result = self.pulumi(["preview", "--json", "--stack", stack], project=project, timeout=timeout)
        return json.loads(result.stdout)

    def destroy(self, project: Path, stack: str, timeout: float = 1800.0) -> dict[str, Any]:
        self.select_stack(project, stack)
        self.pulumi(
            ["destroy", "--yes", "--stack", stack, "--skip-preview", "--suppress-progress"],
            project=project,
            timeout=timeout,
        )
        return self.last_update(project, stack)

    def outputs(self, project: Path, stack: str) -> dict[str, Any]:
        result = self.pulumi(["stack", "output", "--json", "--show-secrets", "--stack", stack], project=project)
        return json.loads(result.stdout or "{}")

    def resources(self, project: Path, stack: str) -> list[dict[str, Any]]:
        """The stack's resources from its exported state."""
        result = self.pulumi(["stack", "export", "--stack", stack], project=project)
        return json.loads(result.stdout).get("deployment", {}).get("resources") or []

    def last_update(self, project: Path, stack: str) -> dict[str, Any]:
        result = self.pulumi(["stack", "history", "--json", "--stack", stack, "--page-size", "1"], project=project)
        history = json.loads(result.stdout or "[]")
        return history[0] if history else {}


def _tail(result: CommandResult, lines: int = 15) -> str:
    text = "\n".join(part for part in (result.stdout, result.stderr) if part.strip())
    return "\n".join(text.strip().splitlines()[-lines:])
