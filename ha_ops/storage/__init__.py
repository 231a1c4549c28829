"""Storage adapters: health of the cluster's replicated storage (MooseFS)."""
