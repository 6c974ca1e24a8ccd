"""Verify a pipeline's mirror with PySpark: each committed source record is in the destination once, unchanged."""
