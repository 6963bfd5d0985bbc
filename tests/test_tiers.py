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
