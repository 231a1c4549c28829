"""The identity of the AWS cluster's instances: one role (and its instance profile) for every node, allowed what a
node does and nothing more: SSM Session Manager (operators and Ansible reach nodes without inbound SSH), the objects
of the cluster's shared S3 bucket (checkpoints), and mounting Slurm's state file system on EFS."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

# AWS's managed policy for SSM's agent. Its own statements use Resource "*": the agent's calls
# (ssm:UpdateInstanceInformation, ssmmessages:*, ec2messages:*) have no resource to scope to; AWS requires it so.
SSM_MANAGED_POLICY = aws.iam.ManagedPolicy.AMAZON_SSM_MANAGED_INSTANCE_CORE

ASSUME_ROLE_BY_EC2 = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}

# Object actions for checkpoints: large writes are multipart uploads (PutObject covers them; aborting one that
# failed is its own action), and old checkpoints are deleted when rotated out.
BUCKET_OBJECT_ACTIONS = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
EFS_CLIENT_ACTIONS = ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"]


def node_policy(bucket_arn: str, file_system_arn: str) -> dict[str, Any]:
    """The inline policy: this bucket and this file system only."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ListSharedBucket", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": bucket_arn},
            # "/*": every key of this bucket (an object's ARN is the bucket's ARN and its key), no other bucket.
            {"Sid": "SharedObjects", "Effect": "Allow", "Action": BUCKET_OBJECT_ACTIONS, "Resource": f"{bucket_arn}/*"},
            {"Sid": "SlurmStateMount", "Effect": "Allow", "Action": EFS_CLIENT_ACTIONS, "Resource": file_system_arn},
        ],
    }


@dataclass(frozen=True)
class NodeIdentity:
    role: aws.iam.Role
    profile: aws.iam.InstanceProfile


def build_node_identity(
    cluster: str, bucket: aws.s3.Bucket, slurm_state: aws.efs.FileSystem, parent: pulumi.Resource
) -> NodeIdentity:
    """Declares the role, its policies and its instance profile under `parent`."""
    child = pulumi.ResourceOptions(parent=parent)
    tags = {"ha-ops/cluster": cluster}
    role = aws.iam.Role(
        f"{cluster}-node",
        assume_role_policy=json.dumps(ASSUME_ROLE_BY_EC2),
        description=f"ha-ops cluster {cluster}: its instances (SSM, the shared bucket, Slurm state on EFS)",
        tags=tags,
        opts=child,
    )
    ssm = aws.iam.RolePolicyAttachment(f"{cluster}-node-ssm", role=role.name, policy_arn=SSM_MANAGED_POLICY, opts=child)
    inline = aws.iam.RolePolicy(
        f"{cluster}-node",
        role=role.id,
        policy=pulumi.Output.all(bucket.arn, slurm_state.arn).apply(lambda arns: json.dumps(node_policy(*arns))),
        opts=child,
    )
    # After the policies: a node must boot with its permissions (SSM's agent registers at boot, Slurm mounts EFS).
    profile = aws.iam.InstanceProfile(
        f"{cluster}-node",
        role=role.name,
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[ssm, inline]),
    )
    return NodeIdentity(role, profile)
