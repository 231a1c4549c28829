"""The root `ha-ops` command (issue 21): command groups registered lazily from a static table, `-h` beside `--help`
everywhere, shell completion offered, and `ha-ops health check` (Slurm's HealthCheckProgram) starting without the
modules it does not use. Structural checks only: which modules a run imports, never how long it takes (that is
tests/bench/cli_startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ha_ops.cli.main import COMMANDS, app, load_command
from ha_ops.gpu.fake import FakeGpus

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
# What `ha-ops health check` must not import: the other command groups and their heavy dependencies (the lab's
# Kubernetes client, SSH, chaos, IaC, Redfish), and what the --json path does not need (rich, YAML, Prometheus).
NOT_FOR_HEALTH_CHECK = ("ha_ops.lab", "ha_ops.chaos", "ha_ops.iac", "ha_ops.remediation", "ha_ops.rollout",
                        "ha_ops.plan", "lightkube", "paramiko", "chaoslib", "chaostoolkit", "pulumi", "sushy",
                        "numpy", "rich", "yaml", "prometheus_client")  # fmt: skip
HEALTH_CHECK_CLI = {"ha_ops.cli", "ha_ops.cli.main", "ha_ops.cli.output", "ha_ops.cli.agent", "ha_ops.cli.gpu"}


def imported_by(*argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `ha-ops ARGV` in a fresh interpreter; its result and the modules it had imported when it exited."""
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)) + '\\n'))\n"
        f"sys.argv = ['ha-ops', *{list(argv)!r}]\n"
        "from ha_ops.cli.main import main\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    line = next(line for line in result.stderr.splitlines() if line.startswith("MODULES "))
    return result, set(json.loads(line.removeprefix("MODULES ")))


def under(modules: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == root or m.startswith(root + ".") for root in roots))


def test_health_check_imports_neither_the_other_command_groups_nor_their_dependencies(tmp_path: Path) -> None:
    FakeGpus.create(tmp_path, "gpu1", 2)
    result, modules = imported_by("health", "check", "--backend", "fake", "--fake-dir", str(tmp_path),
                                  "--node", "gpu1", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "healthy"
    assert under(modules, NOT_FOR_HEALTH_CHECK) == []
    assert {m for m in modules if m.startswith("ha_ops.cli.")} <= HEALTH_CHECK_CLI


def test_the_root_help_lists_every_group_without_importing_one() -> None:
    result, modules = imported_by("--help")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("│ ") and len(line.split()) > 1}
    assert set(COMMANDS) <= listed, set(COMMANDS) - listed
    assert {m for m in modules if m.startswith("ha_ops.cli.")} == {"ha_ops.cli.main", "ha_ops.cli.output"}


def test_the_root_help_lists_every_group_in_process() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    for name, (_, _, short) in COMMANDS.items():
        assert name in result.output and short.split()[0] in result.output, name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_static_one_line_help_matches_the_command_s_own(name: str) -> None:
    command = load_command(name)
    assert command.name == name
    own = " ".join((command.help or "").split())
    short = COMMANDS[name][2]
    assert own == short or own.startswith(short.rstrip(".") + ":"), f"{name}: table says {short!r}, own is {own!r}"


def test_an_unknown_group_is_a_usage_error_that_suggests_the_closest() -> None:
    result = runner.invoke(app, ["helth"])
    assert result.exit_code == 2
    assert "No such command 'helth'" in result.output and "Did you mean 'health'?" in result.output


@pytest.mark.parametrize(
    "argv",
    [[], ["health"], ["health", "check"], ["rollout", "plan"], ["gpu", "fake-fault"], ["inventory"], ["plan"]],
    ids=lambda argv: " ".join(argv) or "root",
)
def test_dash_h_is_help_everywhere(argv: list[str]) -> None:
    result = runner.invoke(app, [*argv, "-h"])
    assert result.exit_code == 0, result.output
    assert "Usage: ha-ops " + " ".join(argv) in " ".join(result.output.split())
    assert "--help" in result.output and "-h" in result.output


def test_the_root_help_offers_shell_completion() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    assert "--install-completion" in result.output and "--show-completion" in result.output


def test_completion_names_the_groups_and_their_commands() -> None:
    def complete(words: str) -> list[str]:
        env = {"_HA_OPS_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
        result = runner.invoke(app, [], env=env, prog_name="ha-ops")
        return result.output.split()

    assert complete("ha-ops hea") == ["health"]
    assert complete("ha-ops health ch") == ["check"]


def test_version_still_works() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("ha-ops ")
