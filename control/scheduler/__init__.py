"""Queue and scheduler: placement, dispatch (with leases) and reconciliation with executors."""
