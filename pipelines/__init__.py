"""The Dagster code location: Definitions, jobs, schedules and example generators."""
