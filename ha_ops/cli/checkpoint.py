"""`ha-ops checkpoint`: look into a checkpoint directory written by ha_ops.checkpoint, and run the reference training
job (the job contract, for game days and an operator's smoke test of a cluster's requeue and shared storage)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from ha_ops.cli import output
from ha_ops.errors import SpecError

app = typer.Typer(help="Checkpoints written by ha_ops.checkpoint, and the reference job.", no_args_is_help=True)


@app.command("ls")
def list_steps(
    directory: Path = typer.Argument(..., help="A checkpoint directory (the one given to Checkpointer)."),
    world_size: int = typer.Option(1, "--world-size", help="The job's ranks (a step saved by others is skipped)."),
    no_verify: bool = typer.Option(False, "--no-verify", help="Check sizes only, not checksums (faster)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """The step a job would resume from, and every step or temp directory it would pass over, with why."""
    from ha_ops.checkpoint import Checkpointer

    if not directory.is_dir():
        raise SpecError(str(directory), ["not a directory"])
    if world_size < 1:
        raise SpecError("--world-size", [f"{world_size} must be at least 1"])
    ckpt = Checkpointer(directory, world_size=world_size, run_id="inspect")  # reads only: it never saves
    restored = ckpt.latest(verify=not no_verify)
    data = {
        "directory": str(directory),
        "latest": restored.step if restored else None,
        "steps": ckpt.steps(),
        "skipped": [{"path": str(s.path), "step": s.step, "kind": s.kind, "reason": s.reason} for s in ckpt.skipped],
    }
    if json_out:
        output.emit_json(data)
        return
    output.result(f"latest valid step: {data['latest'] if restored else 'none'}; committed steps: {data['steps']}")
    for s in ckpt.skipped:
        output.result(f"  skipped {s}")


@app.command()
def job(
    directory: Path = typer.Argument(..., help="The job's folder on shared storage (every node sees it)."),
    steps: int = typer.Option(..., "--steps", help="Steps to run."),
    step_s: float = typer.Option(1.0, "--step-s", help="Seconds per step."),
    save_every: int = typer.Option(1, "--save-every", help="Steps between saves (0: at the end and on a signal)."),
    interval: str | None = typer.Option(
        None, "--interval", help="Also save when this long passed: 90s, 13.6m (`ha-ops plan checkpoint`; one rank)."
    ),
    state_bytes: int = typer.Option(4096, "--state-bytes", help="Size of each save's state."),
    keep: int = typer.Option(3, "--keep", help="Committed steps kept."),
    job_id: str | None = typer.Option(None, "--job-id", help="Default: $SLURM_JOB_ID, $HA_OPS_JOB_ID or $JOB_NAME."),
) -> None:
    """The reference training job: resumes from its latest valid checkpoint, saves atomically, and on SIGTERM or
    SIGUSR1 makes a final save and exits 143. Its events go to DIRECTORY/<job id>.log (docs/checkpointing.md)."""
    from ha_ops.checkpoint.reference_job import JobSettings, job_identity, run
    from ha_ops.plan.durations import parse_duration

    found_id, rank, world, host, restart = job_identity(os.environ)
    job_id = job_id or found_id
    problems = {
        "--job-id": "no job id: pass --job-id, or run under Slurm (SLURM_JOB_ID)" if not job_id else "",
        "--steps": f"{steps} must be at least 1" if steps < 1 else "",
        "--step-s": f"{step_s:g} must be zero or more" if not step_s >= 0 else "",
        "--save-every": f"{save_every} must be zero or more" if save_every < 0 else "",
        "--state-bytes": f"{state_bytes} must be at least 8" if state_bytes < 8 else "",
        "--keep": f"{keep} must be at least 1" if keep < 1 else "",
        "--interval": "one rank only: a job of several ranks saves by --save-every" if interval and world > 1 else "",
    }
    for flag, problem in problems.items():
        if problem:
            raise SpecError(flag, [problem])
    settings = JobSettings(directory=directory, job_id=str(job_id), steps=steps, step_s=step_s, save_every=save_every,
                           interval_s=parse_duration(interval, "--interval") if interval else None,
                           state_bytes=state_bytes, keep=keep, rank=rank, world_size=world)  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    raise typer.Exit(run(settings, host=host, restart=restart))
