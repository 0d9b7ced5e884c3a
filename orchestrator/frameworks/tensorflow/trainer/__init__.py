"""tensorflow's trainer modules: orch build copies them flat into the images' orch_trainer package, beside the
common ones (orchestrator/trainer/); never imported on the host."""
