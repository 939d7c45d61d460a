"""Moved to `trainvault.publication.bound`; this path stays for code that imports it (nothing
inside trainvault does)."""

from trainvault.publication.bound import Bound, D, publish_document, read_document  # noqa: F401
