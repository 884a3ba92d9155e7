"""The benchmark's smoke test runs against the test broker of the integration tests."""

from tests.integration.conftest import kafka_bootstrap  # noqa: F401  (the fixture)
