"""The cluster port (ha_ops.cluster.base): faults as operations (ops), the commands a real host runs for them
(commands), an inventory's hosts (inventory), BMC power (power), GPU fault injection (gpu), and the clusters behind
it: SshCluster (ssh) and LabCluster (lab), chosen by ha_ops.cluster.resolve."""
