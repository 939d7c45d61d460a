"""The publication layer: manifest and descriptor documents, their layout, the saver that
writes them, the verified shard reader, and `Publication`, a manifest read once and pinned."""
