"""Moved to `trainvault.publication.saver`; this path stays for code that imports it (nothing
inside trainvault does)."""

from trainvault.publication.saver import *  # noqa: F401,F403
