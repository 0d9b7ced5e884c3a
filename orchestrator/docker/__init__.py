"""docker."""
