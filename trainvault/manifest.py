"""Moved to `trainvault.publication.manifest`; this path stays for code that imports it (nothing
inside trainvault does)."""

from trainvault.publication.manifest import *  # noqa: F401,F403
