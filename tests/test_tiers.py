"""The two test tiers: a run that deselects the slow tier does not import folders that hold only slow tests."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import SLOW_ONLY, deselects_slow

TESTS = Path(__file__).resolve().parent


def test_only_a_run_that_deselects_slow_skips_the_slow_only_folders():
    assert deselects_slow("not slow") and deselects_slow("not slow and not ray") and deselects_slow("not ray")
    for expr in ("", "slow", "ray", "slow or not slow", "not slow or ray"):
        assert not deselects_slow(expr), expr


def _module_marks(path: Path) -> set[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute)} - {"mark"}
    return set()


def test_every_module_in_a_slow_only_folder_is_marked_slow():
    """A fast test put there would be skipped without a word: every module must carry the slow mark."""
    for name in SLOW_ONLY:
        modules = sorted((TESTS / name).glob("test_*.py"))
        assert modules, name
        for module in modules:
            assert "slow" in _module_marks(module), module


def _cases(decorator):
    """The (values, is-slow) of each case a tiered decorator parametrizes."""
    mark = decorator.mark
    return [(tuple(c.values) if hasattr(c, "values") else c, any(m.name == "slow" for m in getattr(c, "marks", ())))
            for c in mark.args[1]]


def test_tiered_marks_every_case_outside_the_fast_ones_slow():
    import pytest

    from helpers.tiers import tiered, tiered_product

    assert _cases(tiered("op", ["a", "b", "c"], fast=["b"])) == [(("a",), True), ("b", False), (("c",), True)]
    assert [slow for _, slow in _cases(tiered("n", range(4), fast=2))] == [False, False, True, True]
    assert [slow for _, slow in _cases(tiered("x, y", [(1, 2), (3, 4)], fast=lambda x, y: y == 4))] == [True, False]
    # A case that is already a pytest.param keeps its id and marks and gains slow.
    kept = pytest.param(5, id="five", marks=pytest.mark.xfail)
    decorator = tiered("n", [4, kept], fast=[4])
    (_, _), (case, slow) = _cases(decorator)
    assert slow and case == (5,) and decorator.mark.args[1][1].id == "five"
    assert [m.name for m in decorator.mark.args[1][1].marks] == ["xfail", "slow"]
    with pytest.raises(ValueError, match="not in the grid"):
        tiered("op", ["a"], fast=["z"])
    # The product's fast tier is a diagonal: every value of each axis once or more, 3 of the 6 pairs.
    fast = [case for case, slow in _cases(tiered_product("op,dt", ["and", "or", "xor"], ["i8", "u8"])) if not slow]
    assert fast == [("and", "i8"), ("or", "u8"), ("xor", "i8")]


def test_the_files_that_keep_uvloop_in_the_fast_tier_exist_and_run_under_anyio():
    from conftest import UVLOOP_FAST

    for name in UVLOOP_FAST:
        source = (TESTS / name).read_text()
        assert "pytest.mark.anyio" in source, name
