"""ChipActor: a ChipWorker inside an async Ray actor, used from the driver.

Every test runs on the session's two-node cluster (conftest.py), but those of
how Ray's errors map; numbers are compared against torch or numpy on random data.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import ray
import torch
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayTaskError
from .support import COLS, NODE_A, NODE_B, ROOT, ROWS, actor_on, nan_array, probe_class, rand

from pypto_async.errors import (
    PtoArgumentError,
    PtoClosedError,
    PtoCopyFault,
    PtoDeviceLost,
    PtoForeignTensorError,
    PtoNotSupported,
    PtoTensorFreedError,
)
from pypto_async.ray import ChipActor, _settle, call, pipeline
from pypto_async.runtime import ChipWorker
from pypto_async.testing import SIM_DEVICE

pytestmark = pytest.mark.slow  # a two-node Ray cluster: seconds to start


@pytest.mark.asyncio
async def test_quickstart_through_an_actor_matches_torch(actors, programs):
    a, _ = actors
    torch.manual_seed(0)
    A = torch.randn(ROWS, COLS, dtype=torch.float32)
    B = torch.randn(ROWS, COLS, dtype=torch.float32)
    key = await call(a.register, programs["add"])
    assert await call(a.register, programs["add"]) == key  # the same program, the same key
    resident = await call(a.put, B)  # stays on the actor's device
    for batch in range(3):
        x = A + batch
        out = torch.full((ROWS, COLS), float("nan"))
        got = await call(a.run, key, x, resident, out)
        assert isinstance(got, np.ndarray)
        torch.testing.assert_close(torch.from_numpy(got.copy()), x + B, rtol=1e-4, atol=1e-4)
        assert torch.isnan(out).all()  # the caller's array is never written
    await call(a.free, resident)


@pytest.mark.asyncio
async def test_two_actor_pipeline_matches_one_process(actors, programs):
    a, b = actors
    w, bias = rand(1), rand(2)
    xs = [rand(10 + i) for i in range(6)]
    async with ChipWorker(SIM_DEVICE) as local:  # the reference: both stages in this process
        want = []
        for x in xs:
            y = await local.run(programs["scale"], x, w, nan_array())
            want.append(await local.run(programs["add"], y, bias, nan_array()))
    k1, k2 = await call(a.register, programs["scale"]), await call(b.register, programs["add"])
    w_ref, bias_ref = await call(a.put, w), await call(b.put, bias)
    stages = [(a, k1, (w_ref, None)), (b, k2, (bias_ref, None))]
    got = await pipeline(stages, iter(xs), depth=4)
    assert len(got) == len(xs)
    for g, z, x in zip(got, want, xs):
        np.testing.assert_array_equal(g, z)
        np.testing.assert_allclose(g, x * w + bias, rtol=1e-5, atol=1e-5)
    # A failure in the first stage reaches the caller through the second with its type.
    with pytest.raises(PtoArgumentError, match="'x'"):
        await pipeline(stages, [xs[0], np.zeros((2, 2), np.float32)], depth=2)
    await call(a.free, w_ref)
    await call(b.free, bias_ref)


@pytest.mark.asyncio
async def test_tensor_ref_round_trip(actors, programs):
    a, _ = actors
    x, y = rand(3), rand(4)
    ref = await call(a.put, x)
    assert (ref.shape, ref.dtype) == ((ROWS, COLS), "float32")
    assert pickle.loads(pickle.dumps(ref)) == ref
    np.testing.assert_array_equal(await call(a.get, pickle.loads(pickle.dumps(ref))), x)
    # An Out parameter bound to a TensorRef stays on the actor; run returns the ref.
    out = await call(a.alloc, (ROWS, COLS), "float32", nan_array())
    key = await call(a.register, programs["add"])
    assert await call(a.run, key, x, y, out) == out
    np.testing.assert_allclose(await call(a.get, out), x + y, rtol=1e-6)
    await call(a.free, ref)
    with pytest.raises(PtoTensorFreedError, match="was freed"):
        await call(a.get, ref)
    with pytest.raises(PtoTensorFreedError):
        await call(a.run, key, ref, y, None)
    await call(a.free, out)


@pytest.mark.asyncio
async def test_inout_host_arrays_come_back_new_and_refs_accumulate(actors, programs):
    a, _ = actors
    key = await call(a.register, programs["accumulate"])
    x, acc = rand(8), rand(9)
    got = await call(a.run, key, x, acc)  # copied in, and back as a new array
    np.testing.assert_allclose(got, rand(9) + x, rtol=1e-6)
    np.testing.assert_array_equal(acc, rand(9))  # the caller's array is not written
    ref = await call(a.put, acc)
    want = acc
    for _ in range(3):
        assert await call(a.run, key, x, ref) == ref  # accumulates on the actor
        want = want + x
    np.testing.assert_array_equal(await call(a.get, ref), want)
    await call(a.free, ref)


@pytest.mark.asyncio
async def test_a_kernel_that_returns_nothing_gives_back_its_outputs(actors, programs):
    # Was: run returned None and the Out arrays made (or copied) inside the actor were lost.
    a, _ = actors
    x, w = rand(10), rand(11)
    key = await call(a.register, programs["scale_in_place"])
    got = await call(a.run, key, x, w, None)  # an Out made on the actor
    assert isinstance(got, np.ndarray) and got.shape == (ROWS, COLS)
    np.testing.assert_allclose(got, (torch.from_numpy(x) * torch.from_numpy(w)).numpy(), rtol=1e-6)
    got = await call(a.run, key, x, w, nan_array())  # a host Out array: copied, and back new
    np.testing.assert_allclose(got, x * w, rtol=1e-6)
    out = await call(a.alloc, (ROWS, COLS), "float32", nan_array())
    assert await call(a.run, key, x, w, out) == out  # bound to a TensorRef: the ref
    np.testing.assert_allclose(await call(a.get, out), x * w, rtol=1e-6)
    await call(a.free, out)
    # Two outputs (an Out, then an InOut): a tuple in parameter order.
    key2 = await call(a.register, programs["sum_and_accumulate"])
    acc = rand(12)
    total, acc2 = await call(a.run, key2, x, None, acc)
    np.testing.assert_allclose(total, x + x, rtol=1e-6)
    np.testing.assert_allclose(acc2, acc + x, rtol=1e-6)
    np.testing.assert_array_equal(acc, rand(12))  # the caller's array is not written


@pytest.mark.asyncio
async def test_a_ref_of_another_actor_is_refused(actors, programs):
    a, b = actors
    ref = await call(a.put, rand(5))
    key = await call(b.register, programs["add"])
    with pytest.raises(PtoForeignTensorError, match="belongs to another ChipActor"):
        await call(b.run, key, ref, rand(6), None)
    with pytest.raises(PtoForeignTensorError, match="get"):
        await call(b.get, ref)
    # b keeps working, and the ref is still a's.
    np.testing.assert_allclose(await call(b.run, key, rand(5), rand(6), None), rand(5) + rand(6), rtol=1e-6)
    np.testing.assert_array_equal(await call(a.get, ref), rand(5))
    await call(a.free, ref)


@pytest.mark.asyncio
async def test_a_device_tensor_refuses_to_pickle(actors):
    a, _ = actors
    with ChipWorker(SIM_DEVICE) as w:
        t = w.alloc_tensor((4, 4), "float32")
        with pytest.raises(PtoNotSupported, match="TensorRef"):
            pickle.dumps(t)
        with pytest.raises(Exception, match="TensorRef"):  # Ray's serializer reports our refusal
            await call(a.put, t)
        w.free_tensor(t)


@pytest.mark.asyncio
async def test_an_error_inside_the_actor_keeps_its_type(actors, programs):
    a, _ = actors
    key = await call(a.register, programs["add"])
    with pytest.raises(PtoArgumentError, match="'out'"):
        await call(a.run, key, rand(1), rand(2), np.zeros((3, 3), np.float32))
    with pytest.raises(PtoArgumentError, match="no program registered"):
        await call(a.run, "nope", rand(1))
    with pytest.raises(PtoArgumentError):  # awaited without the helper: the same type
        await a.run.remote(key, rand(1))
    masked = await call(a.register, programs["masked"])
    with pytest.raises(PtoArgumentError, match="valid extent"):  # the launch failed on the device
        await call(a.run, masked, rand(7), ROWS + 1, None)
    await call(a.fail_next)  # the next run's first command fails on the device
    with pytest.raises(PtoCopyFault):
        await call(a.run, key, rand(1), rand(2), None)
    want = rand(7)
    want[5:] = 0
    np.testing.assert_array_equal(await call(a.run, masked, rand(7), 5, None), want)  # it keeps working


@pytest.mark.asyncio
async def test_a_bad_config_keeps_its_type_and_the_actor(ray_session, programs):
    actor = ChipActor.options(num_cpus=0, resources={NODE_B: 0.01}).remote({**SIM_DEVICE, "cores": 0})
    for _ in range(2):  # at every call, and the actor stays alive
        with pytest.raises(PtoArgumentError, match="cores"):
            await call(actor.register, programs["add"])
    ray.kill(actor)


@pytest.mark.asyncio
async def test_runs_on_one_actor_overlap_on_the_device(actors, programs):
    a, _ = actors
    key = await call(a.register, programs["add"])
    await call(a.hold_next)  # the stream the next run goes on waits on the device
    first = a.run.remote(key, rand(1), rand(2), None)
    await call(a.held_taken)  # the first run is on the held stream (Ray may start the next call first)
    second = await call(a.run, key, rand(3), rand(4), None)  # on the next stream: not behind the first
    np.testing.assert_allclose(second, rand(3) + rand(4), rtol=1e-6)
    ready, _ = ray.wait([first], timeout=0)
    assert not ready  # still held
    await call(a.release)
    np.testing.assert_allclose(await first, rand(1) + rand(2), rtol=1e-6)


@pytest.mark.asyncio
async def test_a_killed_actor_is_device_lost(actors, programs):
    a, b = actors
    doomed = actor_on(probe_class(), NODE_A)
    key = await call(doomed.register, programs["add"])
    live_a, live_b = await call(a.register, programs["add"]), await call(b.register, programs["add"])
    # ray.kill only asks the GCS to kill the actor and returns: a short call sent right after it
    # can still run, and succeed, before the kill lands.  The doomed actor's next run is held on
    # its device, so that call can end only in the actor's death (it is not restartable).
    await call(doomed.hold_next)
    ray.kill(doomed)
    with pytest.raises(PtoDeviceLost, match="call: the ChipActor died"):
        await call(doomed.run, key, rand(1), rand(2), None)
    with pytest.raises(PtoDeviceLost, match="pipeline: the ChipActor died"):
        await pipeline([(doomed, key, (rand(2), None))], [rand(1)])
    first = (doomed, key, (rand(2), None))
    with pytest.raises(PtoDeviceLost, match="depended on"):  # a live stage fed by the dead one
        await pipeline([first, (a, live_a, (rand(3), None))], [rand(1)])
    with pytest.raises(PtoDeviceLost, match="depended on"):  # and one two stages behind it
        await pipeline([first, (a, live_a, (rand(3), None)), (b, live_b, (rand(4), None))], [rand(1)])


async def _raising(exc):
    raise exc  # what awaiting a Ray ObjectRef does when its task failed


@pytest.mark.asyncio
@pytest.mark.parametrize("death", [
    ActorDiedError(),
    ActorUnavailableError("the actor's process is gone", None),  # what a call can see mid-kill
    RayTaskError("run", "Traceback ...", ActorDiedError()).as_instanceof_cause(),  # a downstream stage
], ids=lambda e: type(e).__name__)
async def test_every_way_ray_reports_a_dead_actor_is_device_lost(death):
    with pytest.raises(PtoDeviceLost, match="call: .* died") as caught:
        await _settle(_raising(death), "call")
    assert caught.value.__cause__ is death


@pytest.mark.asyncio
async def test_other_ray_task_errors_pass_through():
    other = RayTaskError("run", "Traceback ...", ValueError("not a death"))
    with pytest.raises(RayTaskError) as caught:
        await _settle(_raising(other), "call")
    assert caught.value is other


@pytest.mark.asyncio
async def test_actors_land_on_nodes_by_custom_resource(ray_session, actors):
    a, b = actors
    node_a, file_a = await call(a.where)
    node_b, file_b = await call(b.where)
    assert node_a == ray_session.node_ids[NODE_A]
    assert node_b == ray_session.node_ids[NODE_B]
    assert node_a != node_b
    assert file_a == file_b == str(ROOT / "pypto_async" / "__init__.py")  # this checkout's package
    stats = await call(b.stats)
    assert stats.memory_capacity == SIM_DEVICE["device_memory"]


@pytest.mark.asyncio
async def test_close_frees_and_closes(ray_session, programs):
    actor = actor_on(probe_class(), NODE_B)
    ref = await call(actor.put, rand(1))
    await call(actor.close)
    await call(actor.close)  # idempotent
    with pytest.raises(PtoTensorFreedError):
        await call(actor.get, ref)
    ray.kill(actor)


@pytest.mark.asyncio
async def test_run_after_close_is_a_closed_error(ray_session, programs):
    # Was: PtoArgumentError "no program registered" (close forgets the programs), as if the key were wrong.
    actor = actor_on(probe_class(), NODE_B)
    key = await call(actor.register, programs["add"])
    np.testing.assert_allclose(await call(actor.run, key, rand(1), rand(2), None), rand(1) + rand(2), rtol=1e-6)
    await call(actor.close)
    with pytest.raises(PtoClosedError, match="closed"):
        await call(actor.run, key, rand(1), rand(2), None)
    with pytest.raises(PtoClosedError):
        await call(actor.run, "never-registered", rand(1))
    ray.kill(actor)


@pytest.mark.asyncio
async def test_pipeline_refuses_bad_stages_before_sending(actors):
    a, _ = actors
    with pytest.raises(PtoArgumentError, match="depth"):
        await pipeline([(a, "k")], [rand(1)], depth=0)
    with pytest.raises(PtoArgumentError, match="stage 0"):
        await pipeline([a], [rand(1)])
    with pytest.raises(PtoArgumentError, match="no stages"):
        await pipeline([], [rand(1)])


def test_the_example_runs_against_the_cluster(ray_session):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ray_pipeline.py"), "--address", ray_session.address,
         "--batches", "8"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 batches through 2 actors match numpy" in proc.stdout


def test_the_benchmark_runs_against_the_cluster(ray_session, tmp_path):
    # A smoke run (figures, not timing assertions): every round checks its results against numpy.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_ray.py"), "--quick", "--json", str(out),
         "--address", ray_session.address],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["target"] for r in rows] == ["≤ 1.5x", "≥ 1.5x"]
    assert all(r["figure"] > 0 and r["reference"] > 0 for r in rows)


def test_the_actor_class_used_directly_does_not_start_ray():
    code = (
        "import asyncio, numpy as np, ray, torch\n"
        "from pypto_async.ray import ChipWorkerActor\n"
        "async def main():\n"
        "    a = ChipWorkerActor({'platform': 'sim'})\n"
        "    x = torch.randn(4, 4).to(torch.bfloat16)\n"
        "    ref = await a.put(x)\n"
        "    assert (ref.actor_id, ref.dtype) == ('local', 'bfloat16'), ref\n"
        "    assert np.array_equal(await a.get(ref), x.view(torch.uint16).numpy())\n"
        "    await a.close()\n"
        "asyncio.run(main())\n"
        "assert not ray.is_initialized()\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout


def test_the_core_imports_without_ray():
    code = (
        "import sys; sys.modules['ray'] = None\n"  # `import ray` now fails
        "import pypto_async, pypto_async.runtime, pypto_async.ir, pypto_async.language, pypto_async.testing\n"
        "import pypto_async._cli, pypto_async._demo\n"
        "try:\n    import pypto_async.ray\nexcept ImportError:\n    print('no ray: ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "no ray: ok" in proc.stdout
