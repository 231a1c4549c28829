"""The cluster's monitoring: the ha-ops alert rules, written once for the lab, the CLI and the monitoring role."""
