"""Shared fixtures: the test PKI, TLS listeners and the fake Kubernetes API."""

pytest_plugins = ["tests.support.fixtures"]
