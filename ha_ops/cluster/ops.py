"""What a fault does to a node, as data: each fault is a list of operations to inject it and a list to undo it.

Operations are plain values, so the same fault can be journaled (the undo list is written down before anything is
injected), printed by `--dry-run` (each node renders the commands it would run) and carried out by any cluster: the
lab through its namespaces, a real cluster over SSH and its BMCs.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from ha_ops.util.models import ConfigModel

ServiceAction = Literal["start", "stop", "restart", "kill", "freeze", "thaw"]
PowerAction = Literal["off", "on", "cycle"]
GpuFaultKind = Literal["xid", "double_bit_ecc", "row_remap_failure", "overheat", "fallen_off_bus", "clear"]
# Where a filter rule hooks in: before routing (raw), after it (mangle), or the host's own traffic (filter).
FilterHook = Literal["prerouting", "postrouting", "input", "output"]


class ServiceOp(ConfigModel):
    kind: Literal["service"] = "service"
    host: str
    unit: str
    action: ServiceAction


class LinkOp(ConfigModel):
    kind: Literal["link"] = "link"
    host: str
    interface: str
    up: bool


class FilterRule(ConfigModel):
    """Drop what matches: frames in or out of an interface, packets from or to an address, a random share of them."""

    hook: FilterHook
    in_interface: str | None = None
    out_interface: str | None = None
    source: str | None = None
    destination: str | None = None
    probability: float | None = Field(None, gt=0, le=1)


class FilterOp(ConfigModel):
    """Add a named set of drop rules (a chain), or remove it with every rule in it (`rules` empty, `remove`)."""

    kind: Literal["filter"] = "filter"
    host: str
    chain: str = Field(pattern=r"^HAO-[A-Z]+$")
    rules: tuple[FilterRule, ...] = ()
    remove: bool = False


class QdiscOp(ConfigModel):
    """Limit an interface's outgoing rate (token bucket), or remove the limit (`rate_mbit` None)."""

    kind: Literal["qdisc"] = "qdisc"
    host: str
    interface: str
    rate_mbit: float | None = Field(None, gt=0)


class PowerOp(ConfigModel):
    """Through the node's BMC. `permanent` (lab only): broken hardware that no power cycle brings back; `repair`:
    the hardware was replaced first."""

    kind: Literal["power"] = "power"
    host: str
    action: PowerAction
    permanent: bool = False
    repair: bool = False


class GpuOp(ConfigModel):
    """Inject a GPU fault (or clear faults: `fault: clear`, `gpu` None for every GPU)."""

    kind: Literal["gpu"] = "gpu"
    host: str
    fault: GpuFaultKind
    gpu: int | None = Field(None, ge=0)
    xid: int = 79
    celsius: float = 92.0
    permanent: bool = False


Op = Annotated[ServiceOp | LinkOp | FilterOp | QdiscOp | PowerOp | GpuOp, Field(discriminator="kind")]
OPS: TypeAdapter[list[Op]] = TypeAdapter(list[Op])

CAPABILITY_OF = {"service": "services", "link": "links", "filter": "filters", "qdisc": "qdisc", "power": "power",
                 "gpu": "gpu_faults"}  # fmt: skip


def capability(op: Op) -> str:
    """The capability a node needs for this operation (see ClusterNode.capabilities)."""
    return CAPABILITY_OF[op.kind]


def describe(op: Op) -> str:
    """One line for a person: what the operation does, without the commands."""
    if isinstance(op, ServiceOp):
        return f"{op.action} {op.host}/{op.unit}"
    if isinstance(op, LinkOp):
        return f"{op.host} {op.interface} {'up' if op.up else 'down'}"
    if isinstance(op, FilterOp):
        return f"{op.host}: {'remove' if op.remove else 'add'} filter {op.chain}"
    if isinstance(op, QdiscOp):
        limit = f"limit {op.rate_mbit:g} Mbit/s" if op.rate_mbit else "remove the rate limit"
        return f"{op.host} {op.interface}: {limit}"
    if isinstance(op, PowerOp):
        return f"power {op.action} {op.host}" + (" (permanently)" if op.permanent else "")
    gpus = "every GPU" if op.gpu is None else f"GPU{op.gpu}"
    return f"{op.host} {gpus}: {op.fault}" + (" (permanent)" if op.permanent else "")
