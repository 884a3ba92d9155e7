"""The real-broker fixtures of tests/integration, for the kafka tests that need a broker."""

from tests.integration.conftest import (  # noqa: F401
    create_topics,
    kafka_admin,
    kafka_bootstrap,
    unique_name,
)
