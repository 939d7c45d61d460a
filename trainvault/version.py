"""The library version, recorded as the producer of every shard."""

__version__ = "0.1.0"
