"""`ha-ops gpu`: reset (the repair step the remediation controller runs on a node), driver-version, and the fake
backend's fake-init and load-driver (what the lab's driver packages do)."""

from __future__ import annotations

import json
import socket
from enum import StrEnum
from pathlib import Path

import typer

from ha_ops.cli import output
from ha_ops.errors import HaOpsError, SpecError
from ha_ops.util.proc import run

app = typer.Typer(help="GPU operations on this node.", no_args_is_help=True)


class Backend(StrEnum):
    """The GPU backends (ha_ops.gpu.open_backend); an Enum so that --help lists them."""

    NVML = "nvml"
    FAKE = "fake"


class Fault(StrEnum):
    """The fake backend's faults: ha_ops.gpu.fake.FAULTS (tests/unit/test_cli_choices.py keeps the two equal)."""

    XID = "xid"
    DOUBLE_BIT_ECC = "double_bit_ecc"
    ROW_REMAP_FAILURE = "row_remap_failure"
    OVERHEAT = "overheat"
    FALLEN_OFF_BUS = "fallen_off_bus"


@app.command()
def reset(
    gpu: list[int] = typer.Option([], "--gpu", "-g", help="GPU index (repeatable)."),
    all_gpus: bool = typer.Option(False, "--all", help="Every GPU (what a reboot does to them)."),
    backend: Backend = typer.Option(Backend.NVML, "--backend", help="nvml: nvidia-smi -r; fake: the fake GPUs."),
    fake_dir: Path | None = typer.Option(None, "--fake-dir", help="Folder of fake GPUs (fake backend)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be reset; change nothing."),
) -> None:
    """Reset GPUs. The node must be drained first: a reset kills whatever runs on the GPU."""
    if not gpu and not all_gpus:
        raise HaOpsError("name GPUs with --gpu N, or use --all")
    if backend == Backend.FAKE:
        from ha_ops.gpu.fake import FakeGpus

        if fake_dir is None:
            raise HaOpsError("--backend fake needs --fake-dir")
        fake = FakeGpus(fake_dir)
        targets = list(range(fake.count())) if all_gpus else gpu
        if dry_run:
            output.result(f"would reset GPU(s) {targets}")
            return
        done = [i for t in targets for i in fake.reset(t)]
        kept = sorted(set(targets) - set(done))
        output.result(f"reset GPU(s) {done}" + (f"; GPU(s) {kept} have a permanent fault" if kept else ""))
        if kept:
            raise typer.Exit(1)
        return
    argv = ["nvidia-smi", "-r"] + ([] if all_gpus else ["-i", ",".join(map(str, gpu))])
    if dry_run:
        output.result("would run: " + " ".join(argv))
        return
    result = run(argv, timeout=120, check=False)
    output.result(result.stdout.strip())
    if not result.ok:
        output.error(result.stderr.strip())
        raise typer.Exit(1)


@app.command("fake-init")
def fake_init(
    directory: Path = typer.Option(..., "--dir", help="Folder of fake GPUs to create (the agent's fake_dir)."),
    count: int = typer.Option(8, "--count", min=1, max=64, help="How many fake GPUs."),
    node: str | None = typer.Option(None, "--node", help="Node name the UUIDs and serials derive from (hostname)."),
    model: str = typer.Option("NVIDIA H100 80GB HBM3", "--model", help="GPU model name the fake GPUs report."),
) -> None:
    """Create healthy fake GPUs for the fake backend. A folder that already has some is left as it is."""
    from ha_ops.gpu.fake import FakeGpus

    existing = FakeGpus(directory).count() if directory.is_dir() else 0
    if existing:
        # Their state may carry an injected fault on purpose: never overwrite it.
        output.result(f"{directory} already has {existing} fake GPU(s); left as they are")
        return
    FakeGpus.create(directory, node or socket.gethostname(), count, model=model)
    output.result(f"created {count} fake GPU(s) in {directory}")


@app.command("driver-version")
def driver_version(
    backend: Backend = typer.Option(Backend.NVML, "--backend", help="The GPU backend."),
    fake_dir: Path | None = typer.Option(None, "--fake-dir", help="Folder of fake GPUs (fake backend)."),
) -> None:
    """Print the driver version once per GPU, as `nvidia-smi --query-gpu=driver_version --format=csv,noheader`
    does: what a driver rollout validates against its target. Exit 1 when a GPU cannot be read (lost, or the driver
    cannot talk to it), naming it on stderr."""
    from ha_ops.gpu import open_backend
    from ha_ops.gpu.types import known

    gpus = open_backend(backend.value, fake_dir)
    unreadable = []
    try:
        for index in range(gpus.device_count()):
            reading = gpus.sample(index).driver_version
            if known(reading):
                output.result(str(reading))
            else:
                unreadable.append(f"GPU {index}: {getattr(reading, 'error', 'not supported')}")
    finally:
        gpus.close()
    if unreadable:
        output.error("; ".join(unreadable))
        raise typer.Exit(1)


@app.command("load-driver")
def load_driver(
    fake_dir: Path = typer.Option(..., "--fake-dir", help="Folder of fake GPUs."),
    version: str | None = typer.Option(None, "--version", help="The driver version the GPUs report from now on."),
    package: Path | None = typer.Option(
        None,
        "--package",
        envvar="HA_OPS_DRIVER_DIR",
        help="A fake driver package folder: its driver.json gives version and whether it works (the gpu_driver "
        "role's activation sets HA_OPS_DRIVER_DIR).",
    ),
) -> None:
    """Fake backend only: load a driver into the node's fake GPUs (the lab's driver packages call this as their
    activation command). A driver whose package says it does not work loses every GPU."""
    from ha_ops.gpu.fake import FakeGpus

    works = True
    if package is not None:
        manifest = package / "driver.json"
        try:
            data = json.loads(manifest.read_text())
            version, works = str(data["version"]), bool(data.get("works", True))
        except (OSError, ValueError, KeyError) as exc:
            raise SpecError("ha-ops gpu load-driver", [f"--package: cannot read {manifest}: {exc}"]) from exc
    if not version:
        raise SpecError("ha-ops gpu load-driver", ["give --version or --package"])
    fake = FakeGpus(fake_dir)
    if not fake.count():
        raise SpecError("ha-ops gpu load-driver", [f"--fake-dir: {fake_dir} has no fake GPUs"])
    fake.load_driver(version, works=works)
    output.result(f"loaded driver {version} on {fake.count()} fake GPU(s)" + ("" if works else "; every GPU is lost"))


def _fake_gpus(fake_dir: Path, command: str):  # -> FakeGpus
    from ha_ops.gpu.fake import FakeGpus

    fake = FakeGpus(fake_dir)
    if not fake_dir.is_dir() or not fake.count():
        raise SpecError(f"ha-ops gpu {command}", [f"--fake-dir: {fake_dir} has no fake GPUs"])
    return fake


@app.command("fake-fault")
def fake_fault(
    fake_dir: Path = typer.Option(..., "--fake-dir", help="Folder of fake GPUs (the agent's fake_dir)."),
    gpu: int = typer.Option(..., "--gpu", "-g", min=0, help="GPU index."),
    fault: Fault = typer.Option(Fault.XID, "--fault", help="The fault to inject."),
    xid: int = typer.Option(79, "--xid", help="With --fault xid: the XID."),
    celsius: float = typer.Option(92.0, "--celsius", help="With --fault overheat: the temperature."),
    permanent: bool = typer.Option(False, "--permanent", help="No reset or reboot repairs it (broken hardware)."),
) -> None:
    """Fake backend only: inject a GPU fault, as a chaos experiment does on a node that runs the fake backend (the
    chaos actions call this over SSH)."""
    fake = _fake_gpus(fake_dir, "fake-fault")
    if gpu >= fake.count():
        raise SpecError("ha-ops gpu fake-fault", [f"--gpu: {gpu} is not a GPU here (there are {fake.count()})"])
    fake.inject(fault.value, gpu, xid=xid, celsius=celsius, permanent=permanent)
    output.result(f"{fault.value} on GPU{gpu}" + (" (permanent)" if permanent else ""))


@app.command("fake-clear")
def fake_clear(
    fake_dir: Path = typer.Option(..., "--fake-dir", help="Folder of fake GPUs."),
    gpu: int | None = typer.Option(None, "--gpu", "-g", min=0, help="GPU index (default: every GPU)."),
) -> None:
    """Fake backend only: undo injected faults, permanent ones included (the hardware was replaced)."""
    fake = _fake_gpus(fake_dir, "fake-clear")
    if gpu is not None and gpu >= fake.count():
        raise SpecError("ha-ops gpu fake-clear", [f"--gpu: {gpu} is not a GPU here (there are {fake.count()})"])
    fake.clear(gpu)
    output.result(f"cleared {'every GPU' if gpu is None else f'GPU{gpu}'}")
