"""Scheduler adapters: one protocol, Slurm first (Kubernetes later)."""
