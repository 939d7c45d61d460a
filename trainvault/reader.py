"""Moved to `trainvault.publication.reader`; this path stays for code that imports it (nothing
inside trainvault does)."""

from trainvault.publication.reader import *  # noqa: F401,F403
