"""The provider abstraction: components decide what to build and where, a factory builds one thing with a provider.

A factory receives the child's resource name (derived from the component's name), a plain request from a plan, and
the ResourceOptions the component prepared (parent=the component); it must pass those options on. The AWS stack's
factories create EC2 instances and FSx file systems; tests pass factories that create plain custom resources.
"""

from __future__ import annotations

from typing import Protocol

import pulumi

from ha_ops.iac.plans.fabric import Link, Switch
from ha_ops.iac.plans.nodes import NodeRequest
from ha_ops.iac.plans.storage import StorageReplica


class NodeFactory(Protocol):
    def __call__(self, resource_name: str, request: NodeRequest, opts: pulumi.ResourceOptions) -> pulumi.Resource: ...


class SwitchFactory(Protocol):
    def __call__(self, resource_name: str, switch: Switch, opts: pulumi.ResourceOptions) -> pulumi.Resource: ...


class LinkFactory(Protocol):
    def __call__(self, resource_name: str, link: Link, opts: pulumi.ResourceOptions) -> pulumi.Resource: ...


class StorageReplicaFactory(Protocol):
    def __call__(
        self, resource_name: str, replica: StorageReplica, opts: pulumi.ResourceOptions
    ) -> pulumi.Resource: ...
