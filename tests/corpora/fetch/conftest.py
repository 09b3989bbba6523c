from __future__ import annotations

import pytest

from tests.servers import ImageServer


@pytest.fixture()
def server():
    with ImageServer() as srv:
        yield srv


@pytest.fixture()
def other_loopback():
    with ImageServer("127.0.0.2") as srv:
        yield srv
