"""Pulumi mocks for the ha_ops.iac tests: a mock monitor that records every registration with its parent and the
outputs each component registers, so tests can check the resource tree the way the engine would see it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from typing import Any

import pulumi
from google.protobuf import json_format
from pulumi.runtime.mocks import MockMonitor, MockResourceArgs

from ha_ops.iac.plans.fabric import Link, Switch
from ha_ops.iac.plans.nodes import NodeRequest
from ha_ops.iac.plans.storage import StorageReplica

AVAILABILITY_ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
REGION = "us-east-1"
ACCOUNT = "111122223333"
# Where the mocked provider takes the addresses AWS would pick (instances without a private_ip, Elastic IPs).
MOCK_PRIVATE_BASE = IPv4Address("100.64.0.0")
MOCK_PUBLIC_BASE = IPv4Address("198.51.100.0")


@dataclass(frozen=True)
class Registered:
    urn: str
    type: str
    name: str
    parent: str  # the parent's URN
    custom: bool
    dependencies: tuple[str, ...]  # URNs of depends_on resources
    inputs: dict[str, Any]


class _Mocks(pulumi.runtime.Mocks):
    """Every resource gets its inputs back as state, plus what a provider would compute that the code reads."""

    def __init__(self) -> None:
        self.inputs: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[str] = []
        self._lock = threading.Lock()
        self._picked = {"private": 0, "public": 0}

    def _pick(self, kind: str, base: IPv4Address) -> str:
        with self._lock:
            self._picked[kind] += 1
            return str(base + self._picked[kind])

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict]:
        with self._lock:
            self.inputs[(args.typ, args.name)] = dict(args.inputs)
        state = dict(args.inputs)
        if args.typ == "aws:s3/bucket:Bucket":
            state["bucket"] = f"{args.name}-bucket"
            state["arn"] = f"arn:aws:s3:::{state['bucket']}"
        if args.typ == "aws:ec2/placementGroup:PlacementGroup":
            state["name"] = f"{args.name}-pg"
        if args.typ == "aws:efs/fileSystem:FileSystem":
            state["arn"] = f"arn:aws:elasticfilesystem:{REGION}:{ACCOUNT}:file-system/{args.name}-id"
        iam_kind = {"aws:iam/role:Role": "role", "aws:iam/instanceProfile:InstanceProfile": "instance-profile"}
        if args.typ in iam_kind:  # the provider names them (a random suffix), and their ARN holds the name
            state["name"] = f"{args.name}-{iam_kind[args.typ]}"
            state["arn"] = f"arn:aws:iam::{ACCOUNT}:{iam_kind[args.typ]}/{state['name']}"
        if args.typ == "aws:ec2/instance:Instance" and not state.get("privateIp"):
            state["privateIp"] = self._pick("private", MOCK_PRIVATE_BASE)  # AWS picks it from the subnet
        if args.typ == "aws:ec2/eip:Eip":
            state["publicIp"] = self._pick("public", MOCK_PUBLIC_BASE)
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict, list[tuple[str, str]] | None]:
        with self._lock:
            self.calls.append(args.token)
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {"names": AVAILABILITY_ZONES, "zoneIds": [], "groupNames": [], "id": REGION}, []
        if args.token == "aws:index/getRegion:getRegion":
            endpoint = f"ec2.{REGION}.amazonaws.com"
            return {"region": REGION, "name": REGION, "id": REGION, "endpoint": endpoint, "description": ""}, []
        return {}, []


class _Monitor(MockMonitor):
    def __init__(self, mocks: _Mocks) -> None:
        super().__init__(mocks)
        self.seen: list[tuple[str, str, str, str, bool, tuple[str, ...]]] = []
        self.outputs: dict[str, dict[str, Any]] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            registration = (response.urn, request.type, request.name, request.parent, bool(request.custom))
            self.seen.append((*registration, tuple(request.dependencies)))
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        self.outputs[request.urn] = json_format.MessageToDict(request.outputs)
        return super().RegisterResourceOutputs(request)


@dataclass
class Harness:
    mocks: _Mocks
    monitor: _Monitor
    resources: list[Registered] = field(default_factory=list)
    exports: dict[str, Any] = field(default_factory=dict)  # the stack outputs (pulumi.export), resolved

    @classmethod
    def install(cls, project: str = "ha-ops") -> Harness:
        """`project`: the Pulumi project's name, which is also the namespace of `pulumi.Config()`."""
        mocks = _Mocks()
        monitor = _Monitor(mocks)
        pulumi.runtime.set_mocks(mocks, project=project, stack="test", preview=False, monitor=monitor)
        return cls(mocks, monitor)

    def run(self, program: Callable[[], object]) -> object:
        """Run `program` as a Pulumi program; returns its value once every registration has completed (also when
        it raises: Pulumi waits for outstanding registrations before re-raising)."""
        result: dict[str, object] = {}

        @pulumi.runtime.test
        def body() -> pulumi.Output[None]:
            result["value"] = program()
            # The stack's outputs only reach the engine when a real run ends; read them off the root resource.
            stack = pulumi.runtime.get_root_resource()
            exported = dict(getattr(stack, "outputs", {}))
            return pulumi.Output.from_input(exported).apply(self.exports.update)

        try:
            body()
        finally:
            self.resources = [
                Registered(urn, typ, name, parent, custom, deps, self.mocks.inputs.get((typ, name), {}))
                for urn, typ, name, parent, custom, deps in self.monitor.seen
            ]
        return result.get("value")

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.type == typ]

    def one(self, typ: str, name: str) -> Registered:
        found = [r for r in self.resources if r.type == typ and r.name == name]
        assert len(found) == 1, f"{typ} {name}: {len(found)} registered"
        return found[0]

    def parent(self, resource: Registered) -> Registered | None:
        return next((r for r in self.resources if r.urn == resource.parent), None)

    def children(self, resource: Registered) -> list[Registered]:
        return [r for r in self.resources if r.parent == resource.urn]

    def outputs(self, resource: Registered) -> dict[str, Any]:
        return self.monitor.outputs[resource.urn]


# Factories as a provider would be: each builds one custom resource from its request, with the options given.
def node_factory(resource_name: str, request: NodeRequest, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    props = {
        "host": request.name,
        "role": request.role,
        "domain": request.domain,
        "zone": request.zone,
        "leaf": request.leaf,
        "spare": request.spare,
        "gpus": request.gpus,
    }
    return pulumi.CustomResource("test:index:Node", resource_name, props, opts)


def switch_factory(resource_name: str, switch: Switch, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    props = {"switch": switch.name, "tier": switch.tier, "asn": switch.asn, "host_ports": switch.host_ports}
    return pulumi.CustomResource("test:index:Switch", resource_name, props, opts)


def link_factory(resource_name: str, link: Link, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    props = {"lower": link.lower, "upper": link.upper, "kind": link.kind}
    return pulumi.CustomResource("test:index:Link", resource_name, props, opts)


def replica_factory(resource_name: str, replica: StorageReplica, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    props = {"replica": replica.name, "domain": replica.domain, "zone": replica.zone, "serves": list(replica.serves)}
    return pulumi.CustomResource("test:index:Replica", resource_name, props, opts)
