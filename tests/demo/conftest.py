"""The demo's tiny model runs fastest on one thread; each test module here runs with one, then restores the count."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def single_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
