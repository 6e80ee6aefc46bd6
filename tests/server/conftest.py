from tests.server.harness import cluster  # noqa: F401
