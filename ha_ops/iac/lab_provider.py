"""A Pulumi dynamic provider whose resource is a running lab cluster (ha_ops.lab): create brings the lab up from the
spec, delete takes it down, a changed spec replaces it, and refresh reads whether it still runs. The engine runs
the provider in its own process with ha-ops' Python (ha_ops.iac.engine sets PULUMI_PYTHON_CMD), as root."""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider

from ha_ops.spec import ClusterSpec


def _outputs(spec: ClusterSpec) -> dict[str, Any]:
    from ha_ops.lab import kubernetes
    from ha_ops.lab.cluster import Lab, spec_digest

    lab = Lab(spec)
    state = lab.state()
    k8s = kubernetes.summary(lab.ctx)
    return {
        "spec": spec.model_dump_json(),
        "name": spec.name,
        "digest": spec_digest(spec),
        "root": str(lab.paths.root),
        "nodes": sorted(state.nodes),
        "services": len(state.services),
        "kubeconfig": k8s.get("kubeconfig", ""),
        "api_server": k8s.get("api_server", ""),
    }


class LabProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        from ha_ops.lab.cluster import Lab

        spec = ClusterSpec.model_validate_json(props["spec"])
        Lab(spec).up()
        return CreateResult(id_=spec.name, outs=_outputs(spec))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        from ha_ops.lab.cluster import spec_digest

        changed = olds.get("digest") != spec_digest(ClusterSpec.model_validate_json(news["spec"]))
        # A lab is rebuilt, never changed in place: `lab up` refuses a different spec over a running lab.
        return DiffResult(changes=changed, replaces=["spec"] if changed else [], delete_before_replace=True)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        from ha_ops.lab.cluster import Lab
        from ha_ops.lab.paths import LabPaths

        if not LabPaths.for_lab(id_).state_file.exists():
            return ReadResult(id_="", outs={})  # gone: a refresh drops it from the stack
        return ReadResult(id_=id_, outs=_outputs(Lab.from_state(id_).spec) | {"spec": props.get("spec")})

    def delete(self, id_: str, _props: dict[str, Any]) -> None:
        from ha_ops.lab.cluster import teardown
        from ha_ops.lab.paths import LabPaths

        teardown(id_, LabPaths.for_lab(id_))


class LabCluster(Resource):
    """A lab cluster built from `spec`."""

    name: pulumi.Output[str]
    root: pulumi.Output[str]
    nodes: pulumi.Output[list[str]]
    kubeconfig: pulumi.Output[str]
    api_server: pulumi.Output[str]

    def __init__(self, resource_name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None) -> None:
        # As JSON text: Pulumi carries numbers as floats, which the strict spec model refuses for integers.
        props = {"spec": spec.model_dump_json(), "name": None, "digest": None, "root": None, "nodes": None,
                 "services": None, "kubeconfig": None, "api_server": None}  # fmt: skip
        super().__init__(LabProvider(), resource_name, props, opts)
