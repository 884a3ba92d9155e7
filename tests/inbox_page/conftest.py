"""The inbox page's gateway tests run on the real local broker, with the integration tests' fixtures."""

from tests.integration.conftest import (  # noqa: F401
    create_topics,
    kafka_admin,
    kafka_bootstrap,
    unique_name,
)
