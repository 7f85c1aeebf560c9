"""Device mapping and cluster specs for the TensorFlow backend: pure Python, no TensorFlow needed."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pardnn.backend.tf_cluster import TFClusterSpec, cluster_spec_from_dict, devices_per_task, free_ports
from pardnn.backend.tf_devices import (ClusterTarget, DeviceName, LocalTarget, devices_needed, host_device,
                                       map_devices, parse_device, same_device)
from pardnn.errors import InputError, PlacementError

GPUS4 = [f"/device:GPU:{i}" for i in range(4)]


@pytest.mark.parametrize("text, parsed", [
    ("/device:GPU:3", DeviceName(kind="GPU", index=3)),
    ("/gpu:1", DeviceName(kind="GPU", index=1)),
    ("CPU:2", DeviceName(kind="CPU", index=2)),
    ("/job:worker/replica:0/task:1/device:CPU:0", DeviceName("worker", 0, 1, "CPU", 0)),
    ("/job:worker/task:2/device:GPU:1", DeviceName("worker", None, 2, "GPU", 1)),
])
def test_parse_device_forms(text, parsed):
    assert parse_device(text) == parsed


@pytest.mark.parametrize("bad", ["", "/device:GPU:x", "/node:3", "/job:w/task:one/device:CPU:0"])
def test_parse_device_rejects_what_is_not_a_device(bad):
    with pytest.raises(PlacementError):
        parse_device(bad)


def test_logical_cpus_take_the_device_position_and_keep_cpu_indices():
    assert map_devices(GPUS4, LocalTarget("cpu")) == tuple(f"/device:CPU:{i}" for i in range(4))
    assert map_devices(["/device:CPU:2", "/device:CPU:0"], LocalTarget("cpu")) == ("/device:CPU:2", "/device:CPU:0")


def test_gpus_keep_their_index_and_a_missing_gpu_is_a_placement_error():
    assert map_devices(["/device:GPU:1", "/device:GPU:0"], LocalTarget("gpu", available=2)) == \
        ("/device:GPU:1", "/device:GPU:0")
    with pytest.raises(PlacementError, match=r"device 2 \(/device:GPU:2\) needs GPU 2, but this host has 2 GPU"):
        map_devices(GPUS4, LocalTarget("gpu", available=2))


def test_as_named_keeps_the_placement_names():
    assert map_devices(["/gpu:0", "/device:CPU:1"], None) == ("/device:GPU:0", "/device:CPU:1")
    assert map_devices(["/job:worker/task:1/device:GPU:0"], None) == ("/job:worker/replica:0/task:1/device:GPU:0",)
    with pytest.raises(PlacementError, match="same device"):
        map_devices(["/device:GPU:0", "/gpu:0"], None)


def test_cluster_deals_devices_in_contiguous_blocks():
    """5 devices on 2 tasks: ceil(5/2) = 3 per task -> task 0 gets 0,1,2 and task 1 gets 3,4."""
    t = ClusterTarget(("a:1", "b:1"), kind="gpu")
    got = map_devices([f"/device:GPU:{i}" for i in range(5)], t)
    assert got == ("/job:worker/replica:0/task:0/device:GPU:0", "/job:worker/replica:0/task:0/device:GPU:1",
                   "/job:worker/replica:0/task:0/device:GPU:2", "/job:worker/replica:0/task:1/device:GPU:0",
                   "/job:worker/replica:0/task:1/device:GPU:1")
    assert host_device(got) == "/job:worker/replica:0/task:0/device:CPU:0"


def test_cluster_errors_name_the_device_and_the_task():
    t = ClusterTarget(("a:1", "b:1"), kind="cpu", available=(2, 1))
    with pytest.raises(PlacementError, match=r"device 3 \(/device:GPU:3\) needs CPU:1 on task 1 \(b:1\), which has 1"):
        map_devices(GPUS4, t)
    with pytest.raises(PlacementError, match="is on task 5, but the cluster has 2 task"):
        map_devices(["/job:worker/task:5/device:CPU:0"], t)
    with pytest.raises(PlacementError, match="job 'ps'"):
        map_devices(["/job:ps/task:0/device:CPU:0"], t)


@settings(max_examples=200, deadline=None)
@given(k=st.integers(1, 40), tasks=st.integers(1, 9))
def test_cluster_mapping_is_one_to_one_and_fills_tasks_in_order(k, tasks):
    t = ClusterTarget(tuple(f"h{i}:2222" for i in range(tasks)), kind="cpu")
    got = map_devices([f"/device:GPU:{i}" for i in range(k)], t)
    assert len(set(got)) == k
    per = math.ceil(k / tasks)
    for d, name in enumerate(got):
        p = parse_device(name)
        assert (p.task, p.index, p.kind) == (d // per, d % per, "CPU")
    need = devices_needed(got, "cpu")
    assert sum(need.values()) == k and max(need.values()) <= per


def test_same_device_fills_in_missing_job_and_task():
    assert same_device("/job:localhost/replica:0/task:0/device:CPU:1", "/device:CPU:1")
    assert not same_device("/device:CPU:1", "/device:CPU:2")
    assert not same_device("/job:worker/replica:0/task:1/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0")
    assert not same_device("/device:GPU:0", "/device:CPU:0")


def test_cluster_spec_forms_and_errors():
    assert cluster_spec_from_dict({"worker": ["h0:1", "h1:2"]}) == TFClusterSpec(("h0:1", "h1:2"), "worker")
    assert cluster_spec_from_dict({"cluster": {"w": ["h:9"]}, "task": {"type": "w", "index": 0}}).job == "w"
    assert cluster_spec_from_dict({"worker": ["h0:1"]}).target == "grpc://h0:1"
    for bad, msg in [({}, "expected a JSON object"), ({"worker": ["a:1"], "ps": ["b:2"]}, "expected one job"),
                     ({"worker": []}, "must list its tasks"), ({"worker": ["nohost"]}, "is not host:port"),
                     ({"worker": ["h:99999"]}, "is not host:port"),
                     # digits that are not ASCII (a bad-input trial: '²' was an internal error, ValueError, and
                     # '２２' a server that did not start, exit 5)
                     ({"worker": ["h:²"]}, "is not host:port"), ({"worker": ["h:２２"]}, "is not host:port")]:
        with pytest.raises(InputError, match=msg):
            cluster_spec_from_dict(bad)


def test_devices_per_task_and_free_ports():
    names = ["/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:1",
             "/job:worker/replica:0/task:1/device:CPU:0", "/job:worker/replica:0/task:1/device:GPU:0"]
    assert devices_per_task(names, "cpu") == (2, 1)
    assert devices_per_task(names, "gpu") == (0, 1)
    ports = free_ports(3)
    assert len(set(ports)) == 3 and all(1024 <= p < 65536 for p in ports)


def test_transfers_from_outputs_tensorflow_fused_are_reconciled_not_counted_as_missing():
    """oneDNN fuses a Conv2DBackpropFilter (one output) and a BiasAddGrad into one op named after the first,
    whose output 1 is the bias gradient: TensorFlow sends (conv, 1), the model sends (bias, 0), and bias never
    runs. Both leave the comparison; a transfer TensorFlow really added (an existing port) stays."""
    from pardnn.backend.tf_checks import reconcile_fused
    outputs = {"conv": 1, "bias": 1, "relu": 1}
    only_tf = (("conv", 1, "/device:CPU:1"), ("relu", 0, "/device:CPU:1"))
    only_sim = (("bias", 0, "/device:CPU:1"), ("relu", 0, "/device:CPU:0"))
    tf_left, sim_left, fused = reconcile_fused(only_tf, only_sim, outputs, traced={"conv", "relu"})
    assert fused == 1 and tf_left == (("relu", 0, "/device:CPU:1"),) and sim_left == (("relu", 0, "/device:CPU:0"),)
    # nothing fused: an op the trace never shows (pruned) keeps its simulated transfer in the count
    tf_left, sim_left, fused = reconcile_fused(only_tf[1:], only_sim, outputs, traced={"conv", "relu"})
    assert fused == 0 and sim_left == only_sim
