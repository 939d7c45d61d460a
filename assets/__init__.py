"""Dagster asset definitions, one module per lifecycle stage (filled in by the pipeline work)."""
