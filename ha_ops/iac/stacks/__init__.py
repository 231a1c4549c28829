"""Pulumi programs that build a whole cluster from a ClusterSpec on one provider, out of ha_ops.iac.components."""
