"""A GPU cluster on AWS from a cluster spec: every high-availability rule is checked before anything is declared,
then the cluster (network, node identity, GPU nodes, control plane, FSx for Lustre, Slurm state on EFS) is built and
the nodes' addresses exported (`pulumi stack output --json` is what `ha-ops inventory --addresses` reads).
The program is ha_ops.iac.stacks.aws.program(); the stack configuration is described in Pulumi.yaml."""

from __future__ import annotations

from ha_ops.iac.stacks.aws import program

program()
