"""The real-broker fixtures of tests/integration, for the inbox's tests that need one."""

from tests.integration.conftest import (  # noqa: F401
    create_topics,
    kafka_admin,
    kafka_bootstrap,
    unique_name,
)
