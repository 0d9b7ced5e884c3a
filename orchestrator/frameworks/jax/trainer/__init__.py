"""JAX's trainer modules: orch build copies them flat into the JAX image's orch_trainer package, beside the
common ones (orchestrator/trainer/); never imported on the host."""
