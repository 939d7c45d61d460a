"""Dagster ConfigurableResources: object store and dataset spec."""
