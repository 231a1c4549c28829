"""The lab stack: the cluster spec's high-availability policy is checked, then the lab is brought up from the spec.
`pulumi destroy` takes it down."""

from __future__ import annotations

from pathlib import Path

import pulumi

from ha_ops.iac.lab_provider import LabCluster
from ha_ops.iac.policy import enforce_spec
from ha_ops.spec import load_spec

config = pulumi.Config()
spec = load_spec(Path(config.require("spec")))
enforce_spec(spec)  # before anything is created: a spec that breaks an HA rule fails naming it
lab = LabCluster("lab", spec)
pulumi.export("lab", lab.name)
pulumi.export("root", lab.root)
pulumi.export("nodes", lab.nodes)
pulumi.export("kubeconfig", lab.kubeconfig)
