"""The demo's tiny model runs fastest on one thread: each test module here runs with one
(tests/conftest.py's ``single_torch_thread``), then the count is restored."""

import pytest


@pytest.fixture(autouse=True, scope="module")
def _one_thread_per_module(single_torch_thread):
    yield
