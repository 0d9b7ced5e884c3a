"""The toy's trainer modules, copied flat into its image's orch_trainer package."""
