"""Split a parametrized grid between the two test tiers.

``@tiered("op", OPS, fast=["add", "exp"])`` is ``@pytest.mark.parametrize("op", OPS)`` with every
case outside `fast` marked ``slow``: the fast tier (``python3 -m pytest``) runs a representative
few, the slow tier (``-m slow``) the rest, so both tiers together run the whole grid.  Use it where
each case compiles its own kernel and the cases differ only in an operand, dtype or mode.

`fast` is a number (the first that many cases), a collection of cases (values, or tuples of values
for several argument names), or a predicate called with a case's values.  The test ids are those
``pytest.mark.parametrize`` gives.  ``@tiered_product("op,dt", OPS, DTYPES)`` is the same over
every pair, its fast tier a diagonal: each op and each dtype in at least one fast case.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Sequence

import pytest

__all__ = ["tiered", "tiered_product"]


def _values(case, many: bool) -> tuple:
    if isinstance(case, type(pytest.param())):
        return tuple(case.values)
    return tuple(case) if many else (case,)


def tiered(argnames, argvalues: Iterable, *, fast: int | Collection | Callable[..., bool] = 1, **kwargs):
    """``pytest.mark.parametrize(argnames, argvalues, **kwargs)``, the cases outside `fast` marked slow."""
    names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
    many = len(names) > 1
    cases = list(argvalues)
    if isinstance(fast, int):
        keep = set(range(fast))
    elif callable(fast):
        keep = {i for i, case in enumerate(cases) if fast(*_values(case, many))}
    else:
        wanted = [tuple(f) if many else (f,) for f in fast]
        keep = {i for i, case in enumerate(cases) if _values(case, many) in wanted}
        if len(keep) != len(wanted):
            raise ValueError(f"tiered({argnames!r}): fast names cases not in the grid: {fast!r}")
    if not keep:
        raise ValueError(f"tiered({argnames!r}): no case is in the fast tier")
    out = []
    for i, case in enumerate(cases):
        if i in keep:
            out.append(case)
        elif isinstance(case, type(pytest.param())):
            out.append(pytest.param(*case.values, marks=(*case.marks, pytest.mark.slow), id=case.id))
        else:
            out.append(pytest.param(*_values(case, many), marks=pytest.mark.slow))
    return pytest.mark.parametrize(argnames, out, **kwargs)


def tiered_product(argnames, *axes: Sequence, **kwargs):
    """:func:`tiered` over the product of `axes` (the first varying slowest, as stacked parametrizes).

    The fast tier is a diagonal: case k of ``max(len(axis))`` takes value ``k % len(axis)`` of each
    axis, so every value of every axis is in the fast tier once or more.
    """
    axes = [list(a) for a in axes]
    diagonal = {tuple(a[k % len(a)] for a in axes) for k in range(max(map(len, axes)))}
    return tiered(argnames, list(itertools.product(*axes)), fast=lambda *case: case in diagonal, **kwargs)
