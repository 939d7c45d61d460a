"""Example dataset generators used by the demo and the example pipeline."""
