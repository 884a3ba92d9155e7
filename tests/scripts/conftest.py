"""run.sh's demo test uses the real local broker, with the integration tests' fixtures."""

from tests.integration.conftest import kafka_bootstrap, unique_name  # noqa: F401
