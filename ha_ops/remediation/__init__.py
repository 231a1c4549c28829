"""The remediation controller: findings -> safe actions, with leader election, fencing, persisted state and an
audit log. Pure policy and safety modules; the controller and executor do the I/O."""
