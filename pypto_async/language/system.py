"""``pl.system``: PyPTO's cross-core transfer, synchronisation and device geometry queries.

None of these can be served by the sim: it runs each region of a kernel as
one task on one core, so there are no peer cores to synchronise with in a
kernel (``syncall``), no per-core caches to fence or invalidate, no device
geometry a kernel is sized from at trace time.  Each raises
``PtoNotSupported`` naming itself.  ``task_dummy`` is served: it joins task
ids into one (see :mod:`._submit`), and so are the cross-core pipes
(``tpush_*`` / ``tpop_*`` / ``tfree_*``, ``*_initialize_pipe``,
``reserve_buffer``, ``import_peer_buffer``, ``AUTO``; see :mod:`._ops_crosscore`), and the
explicit events ``set_ffts`` / ``sync_set`` / ``sync_wait`` (see :mod:`._ops_sync`), and the
intra-core flags and barriers ``sync_src`` / ``sync_dst`` / ``bar_v`` / ``bar_m`` / ``bar_all`` and
``task_invalid`` (see :mod:`._ops_barrier`).
"""

from __future__ import annotations

from ..errors import PtoNotSupported

__all__ = ["task_dummy", "syncall", "fence", "cacheinvalid", "available_aiv_count", "available_cluster_count"]

# The cross-core pipes (tpush / tpop / tfree and their setup): see :mod:`._ops_crosscore`.
from ._ops_crosscore import (  # noqa: E402
    AUTO,
    aic_initialize_pipe,
    aiv_initialize_pipe,
    import_peer_buffer,
    reserve_buffer,
    tfree_to_aic,
    tfree_to_aiv,
    tpop_from_aic,
    tpop_from_aiv,
    tpush_to_aic,
    tpush_to_aiv,
)

__all__ += ["AUTO", "tpush_to_aiv", "tpush_to_aic", "tpop_from_aic", "tpop_from_aiv", "tfree_to_aic", "tfree_to_aiv",
            "aic_initialize_pipe", "aiv_initialize_pipe", "reserve_buffer", "import_peer_buffer"]


def _refuse(name: str, why: str):
    raise PtoNotSupported(f"pl.system.{name}: {why}")


def task_dummy(*, deps=None):
    """A dependency join with no work: one task id standing for all of ``deps`` (see :mod:`._submit`)."""
    from ._submit import task_dummy as join

    return join(deps=deps)


def syncall(*args, **kwargs):
    """Synchronise the cores of a launch from inside the kernel (PyPTO); not available here."""
    _refuse("syncall", "the sim runs each block to completion on its own, so blocks cannot wait for each other")


def fence(*args, **kwargs):
    """A memory fence between cores (PyPTO); not available here."""
    _refuse("fence", "the sim has no per-core caches or write buffers to order")


def cacheinvalid(*args, **kwargs):
    """Invalidate a core's cache of global memory (PyPTO); not available here."""
    _refuse("cacheinvalid", "the sim has no per-core caches")


def available_aiv_count(*args, **kwargs):
    """The device's vector core count, for sizing a launch (PyPTO); not available here."""
    _refuse("available_aiv_count", "a kernel is traced before any device is chosen; pass the block count "
                                   "(pl.spmd(n)) explicitly")


def available_cluster_count(*args, **kwargs):
    """The device's cluster count, for sizing a launch (PyPTO); not available here."""
    _refuse("available_cluster_count", "the sim has no clusters; pass the block count (pl.spmd(n)) explicitly")


# Explicit Cube/Vector cross-core events: see :mod:`._ops_sync`.
from ._ops_sync import set_ffts, sync_set, sync_wait  # noqa: E402

__all__ += ["set_ffts", "sync_set", "sync_wait"]

# Intra-core flags and pipe barriers, and the "no producer" task id: see :mod:`._ops_barrier`.
from ._ops_barrier import bar_all, bar_m, bar_v, sync_dst, sync_src, task_invalid  # noqa: E402

__all__ += ["sync_src", "sync_dst", "bar_v", "bar_m", "bar_all", "task_invalid"]
