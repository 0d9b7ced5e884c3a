"""orch's trainer: runs inside the images, one process per worker container."""
