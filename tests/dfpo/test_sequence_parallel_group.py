"""DFPO's worker needs verl's sequence-parallel group when SP_SIZE>1, and says so at start-up.

The real engine's group is exercised by tests/integration/test_dfpo_exact_update.py (Ulysses SP 2 on 2
gloo ranks, through ``enable_dfpo``); here, the start-up check's branches.
"""

from __future__ import annotations

import types

import pytest

from dfpo.verl.sequence_parallel import require_sequence_parallel_group


class EngineWithoutGroup:
    pass


def test_sequence_parallel_without_the_engine_group_fails_at_start_up_naming_it():
    with pytest.raises(
        RuntimeError,
        match=r"ulysses_sequence_parallel_size=2, but verl's engine \(EngineWithoutGroup\) "
        r"has no ulysses_parallel_group",
    ):
        require_sequence_parallel_group(EngineWithoutGroup(), 2)


@pytest.mark.parametrize("size", [1, None])
def test_without_sequence_parallelism_no_group_is_needed(size):
    require_sequence_parallel_group(EngineWithoutGroup(), size)


def test_an_engine_with_its_group_passes():
    require_sequence_parallel_group(types.SimpleNamespace(ulysses_parallel_group=object()), 4)


def test_verl_fsdp_engine_sets_the_group_it_is_read_from():
    """verl 0.9.1's FSDP engine assigns ``ulysses_parallel_group`` in ``_init_device_mesh``."""
    import inspect

    from verl.workers.engine import FSDPEngineWithLMHead

    source = inspect.getsource(FSDPEngineWithLMHead._init_device_mesh)
    assert "self.ulysses_parallel_group = self.ulysses_device_mesh" in source
