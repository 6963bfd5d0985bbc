"""``pl.optimizations``: the module PyPTO keeps a region's optimization hints in.

The same objects as ``pl.split``, ``pl.cross_core_slot`` and their classes (see :mod:`._hints`):
``pl.at(..., optimizations=[pl.optimizations.split(mode)])`` is ``optimizations=[pl.split(mode)]``.
"""

from ._hints import CrossCoreSlot, Optimization, Split, cross_core_slot, split

__all__ = ["Optimization", "Split", "CrossCoreSlot", "split", "cross_core_slot"]
