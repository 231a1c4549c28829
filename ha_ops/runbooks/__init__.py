"""Recovery runbooks: Markdown for the on-call engineer, with machine-checkable front matter that
`ha-ops runbook verify` runs in the lab."""
