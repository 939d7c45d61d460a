"""Test support code that is not a fixture: chain builders, bad-input strategies, the fault
proxy, the recall sweep, services, deployments and the S3 test settings.

Test modules never import it; the conftest of the layer that uses a module exposes it through fixtures.
"""
