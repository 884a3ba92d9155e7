"""The bridge tests use the real broker, started as for tests/integration."""

from __future__ import annotations

import pytest

from tests.integration.conftest import (  # noqa: F401  (fixtures)
    create_topics,
    kafka_admin,
    kafka_bootstrap,
)
from tests.integration.support import Namespace


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:  # noqa: F811
    return Namespace(kafka_bootstrap)
