"""dfpo.launch.driver_setup.cluster_to_join: the Ray cluster verl's ``ray.init`` will join, found as Ray
2.60 finds it, and a stale address file stopped in seconds instead of minutes of GCS time-outs.

Ray removes ``<temp dir>/ray/ray_current_cluster`` only in ``ray stop``; a plain ``ray.init()`` (what
verl's ``run_ppo`` calls, with ``ray_kwargs.ray_init``) joins the address it names whenever
``RAY_ADDRESS`` is unset. Measured here: with a file naming a port where nothing listens,
``ray.init()`` was still printing "Failed to get cluster ID from GCS server" after 2 minutes.
"""

from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager
from unittest import mock

import pytest
from omegaconf import OmegaConf

from dfpo.launch.driver_setup import (
    DriverSetupError,
    cluster_to_join,
    drop_node_resources_on_a_cluster,
    ray_address_file,
)
from tests.slurm_cluster import free_ports


def _config(**ray_init):
    return OmegaConf.create({"ray_kwargs": {"ray_init": {"num_cpus": 16, "num_gpus": 2, **ray_init}}})


@contextmanager
def _listening():
    """A TCP port that accepts connections, as a running head's GCS does."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def _closed_port() -> int:
    (port,) = free_ports(1)  # nothing listens there once the probe is closed
    return port


@pytest.mark.parametrize(
    "environ",
    [{}, {"TMPDIR": "/scratch/t"}, {"RAY_TMPDIR": "/scratch/r", "TMPDIR": "/scratch/t"}],
    ids=["default", "TMPDIR", "RAY_TMPDIR"],
)
def test_the_file_is_the_one_ray_reads(environ):
    """Seam: the path is Ray's own get_ray_address_file, in the same environment and for _temp_dir."""
    from ray._common.utils import get_ray_address_file

    with mock.patch.dict(os.environ, environ, clear=True):
        assert str(ray_address_file(_config(), environ)) == get_ray_address_file(None)
    assert str(ray_address_file(_config(_temp_dir="/data/ray"), environ)) == get_ray_address_file("/data/ray")


def test_ray_init_would_join_the_address_the_file_names(tmp_path):
    """The premise: with RAY_ADDRESS unset, Ray's bootstrap resolution returns the file's address."""
    from ray._private import services

    (tmp_path / "ray_current_cluster").write_text("10.1.2.3:6379")
    with mock.patch.dict(os.environ, {}, clear=True), mock.patch.object(services, "find_gcs_addresses", lambda: set()):
        assert services.get_ray_address_from_environment(None, str(tmp_path)) == "10.1.2.3:6379"


def test_no_file_means_a_ray_of_the_launchs_own(tmp_path):
    config = _config(_temp_dir=str(tmp_path))
    assert cluster_to_join(config, environ={}) is None
    assert drop_node_resources_on_a_cluster(config, say=pytest.fail, environ={}) == []
    assert config.ray_kwargs.ray_init.num_cpus == 16


def test_a_stale_file_stops_the_launch_in_seconds_naming_the_file_and_what_to_do(tmp_path):
    path = tmp_path / "ray_current_cluster"
    address = f"127.0.0.1:{_closed_port()}"
    path.write_text(address)
    started = time.monotonic()
    with pytest.raises(DriverSetupError) as raised:
        drop_node_resources_on_a_cluster(_config(_temp_dir=str(tmp_path)), say=pytest.fail, environ={})
    assert time.monotonic() - started < 15
    message = str(raised.value)
    for said in (str(path), repr(address), "nothing answers", "ray stop", "RAY_ADDRESS=local", "RAY_ADDRESS to"):
        assert said in message, (said, message)


@pytest.mark.parametrize("content", ["not-an-address", "10.0.0.1:", ":6379"])
def test_an_unreadable_address_in_the_file_stops_the_launch(tmp_path, content):
    (tmp_path / "ray_current_cluster").write_text(content)
    with pytest.raises(DriverSetupError, match="names the cluster at"):
        cluster_to_join(_config(_temp_dir=str(tmp_path)), environ={}, answers=lambda host, port: True)


def test_a_running_cluster_the_file_names_is_joined_without_sizing_its_nodes(tmp_path):
    with _listening() as port:
        address = f"127.0.0.1:{port}"
        (tmp_path / "ray_current_cluster").write_text(address + "\n")
        config, said = _config(_temp_dir=str(tmp_path)), []
        assert drop_node_resources_on_a_cluster(config, say=said.append, environ={}) == ["num_cpus", "num_gpus"]
    assert "num_cpus" not in config.ray_kwargs.ray_init and "num_gpus" not in config.ray_kwargs.ray_init
    assert said == [
        f"dfpo: joining the running Ray cluster at {address}: its nodes' resources are their ray start's, so not "
        "passing ray_kwargs.ray_init.{num_cpus,num_gpus}"
    ]


@pytest.mark.parametrize(
    ("environ", "ray_init", "joined"),
    [
        ({"RAY_ADDRESS": "local"}, {}, None),
        ({"RAY_ADDRESS": "10.0.0.1:6379"}, {}, "10.0.0.1:6379"),
        ({}, {"address": "10.0.0.2:6379"}, "10.0.0.2:6379"),
        ({}, {"address": "local"}, None),
        ({"RAY_ADDRESS": "local"}, {"address": "10.0.0.2:6379"}, None),  # Ray: the environment wins
    ],
)
def test_an_address_said_outright_wins_over_the_file(tmp_path, environ, ray_init, joined):
    """RAY_ADDRESS, else ray_init.address, as Ray reads them; a stale file is then never read."""
    (tmp_path / "ray_current_cluster").write_text(f"127.0.0.1:{_closed_port()}")
    config = _config(_temp_dir=str(tmp_path), **ray_init)
    assert cluster_to_join(config, environ=environ, answers=pytest.fail) == joined


def test_auto_without_a_file_joins_whatever_ray_finds(tmp_path):
    assert cluster_to_join(_config(_temp_dir=str(tmp_path), address="auto"), environ={}) == "auto"


def test_auto_reads_the_file_as_ray_does(tmp_path):
    (tmp_path / "ray_current_cluster").write_text(f"127.0.0.1:{_closed_port()}")
    with pytest.raises(DriverSetupError, match="nothing answers"):
        cluster_to_join(_config(_temp_dir=str(tmp_path), address="auto"), environ={})
