"""Authentication between ha-ops' parts: mutual TLS with identities from the cluster CA (docs/security.md)."""
