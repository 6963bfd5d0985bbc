"""One Ray instance for the test session: a two-node local cluster, for this package's tests.

``ray_session``
    Starts a head node (2 CPUs, custom resource ``pto_node_a``) and a second
    node (no CPUs, resource ``pto_node_b``), each with a 100 MiB object
    store, no dashboard, ``RAY_AUTH_MODE=disabled``; connects this process as
    the driver.  Actors run with ``num_cpus=0``.  The fixtures are
    package-scoped: after the last test here (the rest of the suite runs
    without Ray's daemons) it shuts Ray down, then checks that every process
    Ray started is gone and that no file Ray made is left in ``/dev/shm``.
    Ray's processes are the children this process gained while the cluster
    started (the nodes' daemons) and their descendants (the workers and
    agents the raylets start), recorded by pid and start time after every
    test; a leftover is ended by its pid, and the teardown fails.  A file in
    ``/dev/shm`` is Ray's if one of those processes mapped or held it (other
    test sessions running at the same time make their own).
``actors``
    Two :class:`Probe` actors (a ChipActor with a few test-only methods),
    one placed on each node by its custom resource.

The directory is a package named ``ray_cluster``: named ``ray`` it would
hide Ray itself, and outside a package this file would be imported as the
top-level module ``conftest`` that the runtime tests import helpers from.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

import pypto_async.language as pl  # noqa: E402
from pypto_async import ir  # noqa: E402
from .support import COLS, NODE_A, NODE_B, ROWS, actor_on, probe_class  # noqa: E402

STORE = 100 << 20  # per node: about 200 MiB of object store in all


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.ray)


# -- Ray's processes, by pid -----------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of a process from /proc, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return int(fields[1]), fields[0], int(fields[19])


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _proc_stat(int(name))) is not None:
            out.setdefault(st[0], []).append(int(name))
    return out


class RayProcesses:
    """The processes Ray started, recorded as (pid, start time).

    Its roots are the children this process gained while the cluster started
    (the nodes' daemons); every descendant of theirs (the workers and agents a
    raylet starts) is Ray's too.  Other children of this process, which other
    tests may leave running, are not.
    """

    def __init__(self):
        self.seen: dict[int, int] = {}
        self.names: set[str] = set()
        self._before = set(_children().get(os.getpid(), ()))
        self._roots: list[int] = []

    def started(self) -> None:
        """Take the children born since construction as the roots."""
        self._roots = [pid for pid in _children().get(os.getpid(), ()) if pid not in self._before]
        self.record()

    def record(self) -> None:
        children = _children()
        todo = list(self._roots)
        while todo:
            pid = todo.pop()
            st = _proc_stat(pid)
            if st is not None and pid not in self.seen:
                self.seen[pid] = st[2]
                self.names.add(_comm(pid))
            todo.extend(children.get(pid, ()))

    def alive(self) -> list[int]:
        """The recorded processes still running (a zombie or a reused pid is gone)."""
        out = []
        for pid, start in self.seen.items():
            st = _proc_stat(pid)
            if st is not None and st[2] == start and st[1] != "Z":
                out.append(pid)
        return out

    def end_leftovers(self, grace: float = 30.0) -> list[int]:
        """Wait up to `grace` seconds for every recorded process to exit; kill the rest by pid."""
        deadline = time.monotonic() + grace
        while (left := self.alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return left


def _shm_of(pids) -> set[str]:
    """Names in /dev/shm that the given processes map or hold open."""
    names = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                names.update(line.split("/dev/shm/", 1)[1].split()[0] for line in f if "/dev/shm/" in line)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    names.add(target[len("/dev/shm/"):].split()[0])
        except OSError:
            continue
    return names


def _shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


class RaySession:
    """What the tests need of the session's cluster."""

    def __init__(self, cluster, address: str, node_ids: dict[str, str], procs: RayProcesses):
        self.cluster = cluster
        self.address = address
        self.node_ids = node_ids  # resource name -> node id
        self.procs = procs


@pytest.fixture(scope="package")
def ray_session():
    old_auth = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    shm_before = _shm()
    procs = RayProcesses()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "object_store_memory": STORE, "include_dashboard": False, "resources": {NODE_A: 1}})
    try:
        second = cluster.add_node(num_cpus=0, object_store_memory=STORE, resources={NODE_B: 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        procs.started()
        node_ids = {NODE_A: cluster.head_node.node_id, NODE_B: second.node_id}
        yield RaySession(cluster, cluster.address, node_ids, procs)
        procs.record()
    finally:
        ray_pids = procs.alive()
        held = _shm_of([*ray_pids, os.getpid()])
        ray.shutdown()
        cluster.shutdown()
        if old_auth is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = old_auth
    leftovers = procs.end_leftovers()
    assert {"gcs_server", "raylet"} <= procs.names, f"the check did not see Ray's daemons: {procs.names}"
    new = _shm() - shm_before
    stray = new & held
    assert not leftovers, f"Ray processes left after shutdown (killed by pid): {leftovers}"
    assert not stray, f"files left in /dev/shm by the Ray session: {sorted(stray)}"


@pytest.fixture(autouse=True)
def _record_ray_processes(request):
    yield
    if "ray_session" in request.fixturenames:
        request.getfixturevalue("ray_session").procs.record()


# -- actors and programs ---------------------------------------------------------------------


@pytest.fixture(scope="package")
def actors(ray_session):
    cls = probe_class()
    a, b = actor_on(cls, NODE_A), actor_on(cls, NODE_B)
    yield a, b
    for actor in (a, b):
        ray.kill(actor)


@pytest.fixture(scope="package")
def programs(tmp_path_factory):
    """The seed quickstart's add kernel, two stages of a pipeline (``x * w``, then ``y + b``), and more."""

    @pl.jit
    def add_kernel(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0], [ROWS, COLS])
            tb = pl.load(b, [0, 0], [ROWS, COLS])
            pl.store(pl.add(ta, tb), [0, 0], out)
        return out

    @pl.jit
    def scale(x: pl.Tensor, w: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(x, [0, 0], [ROWS, COLS]), pl.load(w, [0, 0], [ROWS, COLS])), [0, 0], out)
        return out

    @pl.jit
    def masked(x: pl.Tensor, n: pl.Scalar[pl.INDEX], out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [ROWS, COLS], valid_shape=[n, COLS])
            pl.store(pl.fillpad(t, pl.PadValue.zero), [0, 0], out)
        return out

    @pl.jit
    def accumulate(x: pl.Tensor, acc: pl.InOut[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.add(pl.load(acc, [0, 0], [ROWS, COLS]), pl.load(x, [0, 0], [ROWS, COLS])), [0, 0], acc)
        return acc

    @pl.jit
    def scale_in_place(x: pl.Tensor, w: pl.Tensor, out: pl.Out[pl.Tensor]):  # returns nothing
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(x, [0, 0], [ROWS, COLS]), pl.load(w, [0, 0], [ROWS, COLS])), [0, 0], out)

    @pl.jit
    def sum_and_accumulate(x: pl.Tensor, total: pl.Out[pl.Tensor], acc: pl.InOut[pl.Tensor]):  # nothing
        with pl.at(level=pl.Level.CORE_GROUP):
            tx = pl.load(x, [0, 0], [ROWS, COLS])
            pl.store(pl.add(tx, tx), [0, 0], total)
            pl.store(pl.add(pl.load(acc, [0, 0], [ROWS, COLS]), tx), [0, 0], acc)

    x = np.zeros((ROWS, COLS), np.float32)
    return {
        "scale_in_place": ir.compile(scale_in_place.lower(x, x, x)),
        "sum_and_accumulate": ir.compile(sum_and_accumulate.lower(x, x, x)),
        "accumulate": ir.compile(accumulate.lower(x, x)),
        "add": ir.compile(add_kernel.lower(x, x, x)),
        "scale": ir.compile(scale.lower(x, x, x)),
        "masked": ir.compile(masked.lower(x, pl.RUNTIME, x)),
    }
