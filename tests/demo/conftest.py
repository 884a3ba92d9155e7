"""The demo tests run on the real local broker, with the integration tests' fixtures."""

from tests.integration.conftest import kafka_bootstrap, unique_name  # noqa: F401
