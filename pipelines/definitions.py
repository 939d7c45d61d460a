"""The code location loaded by workspace.yaml."""

import dagster as dg

defs = dg.Definitions()
