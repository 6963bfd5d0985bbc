"""The packages are laid in floors: no import circle in ``ir/`` or ``runtime/``, function-level imports included.

A module's import graph here has an edge for every relative import of a
sibling module, at the top of the file or inside a function (a
function-level import runs when it is called, so it ties the two modules
as much as one at the top; it only hides the tie from a reader).  Imports
under ``if TYPE_CHECKING:`` are left out: they never run.  Every
function-level relative import that remains says why, in a comment on its
line or the line before.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "pypto_async"

_PACKAGES = ["ir", "runtime"]


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    return skip


@functools.lru_cache(maxsize=None)
def _parsed(path: pathlib.Path, stamp: tuple[int, int]) -> tuple[tuple[str, ...], tuple[tuple, ...]]:
    """A module's lines and its relative imports outside ``if TYPE_CHECKING:``, in ``ast.walk`` order, each as
    (line, level, module, names, at the top level); parsed once for both checks (`stamp`: mtime, size).

    The tree itself is not kept: held for the rest of the session, its nodes would be walked by every
    later full collection of the garbage collector.
    """
    src = path.read_text()
    tree = ast.parse(src)
    skip = _type_checking_only(tree)
    top = {id(n) for n in tree.body}
    found = tuple((node.lineno, node.level, node.module, tuple(a.name for a in node.names), id(node) in top)
                  for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.level and id(node) not in skip)
    return tuple(src.splitlines()), found


def parsed(path: pathlib.Path) -> tuple[tuple[str, ...], tuple[tuple, ...]]:
    st = path.stat()
    return _parsed(path, (st.st_mtime_ns, st.st_size))


def imports(pkgdir: pathlib.Path) -> dict[str, dict[str, list[tuple[int, bool]]]]:
    """Module -> sibling module -> [(line, at the top level)] for every ``from .x import`` / ``from . import x``."""
    mods = {p.stem: p for p in pkgdir.glob("*.py")}
    edges: dict[str, dict[str, list[tuple[int, bool]]]] = {m: {} for m in mods}
    for m, p in mods.items():
        for line, level, module, names, at_top in parsed(p)[1]:
            if level != 1:
                continue
            for t in [module] if module else names:
                t = t.split(".")[0]
                if t in mods and t != m:
                    edges[m].setdefault(t, []).append((line, at_top))
    return edges


def circles(edges: dict[str, dict]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def describe(edges: dict[str, dict], comps: list[list[str]]) -> str:
    lines = []
    for comp in comps:
        lines.append(f"{len(comp)} {comp}")
        for a in comp:
            for b, sites in sorted(edges[a].items()):
                if b in comp:
                    lines.append(f"    {a} -> {b} {sites}  (line, top level)")
    return "\n".join(lines)


def unexplained(pkgdir: pathlib.Path) -> list[str]:
    """Function-level relative imports (any level) with no comment on their line or the line before."""
    out = []
    for p in sorted(pkgdir.glob("*.py")):
        lines, found = parsed(p)
        for lineno, _, _, _, at_top in found:
            if at_top:
                continue
            line = lines[lineno - 1]
            before = lines[lineno - 2].strip() if lineno > 1 else ""
            if "#" not in line and not before.startswith("#"):
                out.append(f"{p.name}:{lineno}: {line.strip()}")
    return out


@pytest.mark.parametrize("pkg", _PACKAGES)
def test_no_import_circle(pkg):
    edges = imports(ROOT / pkg)
    comps = circles(edges)
    assert not comps, f"import circles in pypto_async/{pkg}/ (function-level imports included):\n" + describe(
        edges, comps)


@pytest.mark.parametrize("pkg", _PACKAGES)
def test_every_function_level_import_says_why(pkg):
    missing = unexplained(ROOT / pkg)
    assert not missing, (f"function-level imports in pypto_async/{pkg}/ with no comment saying why (on the "
                         "line or the line before):\n" + "\n".join(missing))


def test_the_graph_sees_a_circle_closed_in_a_function(tmp_path):
    """The check itself: a circle closed only inside a function counts; one under TYPE_CHECKING does not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_low.py").write_text("def f():\n    from ._high import g\n    return g\n")
    (pkg / "_high.py").write_text("from ._low import f\n\ndef g():\n    return f\n")
    (pkg / "_typed.py").write_text("from typing import TYPE_CHECKING\n\nfrom ._low import f\n\n"
                                   "if TYPE_CHECKING:\n    from ._high import g\n")
    (pkg / "_said.py").write_text("def h():\n    from ._low import f  # here: the reason\n    return f\n")
    edges = imports(pkg)
    assert edges["_low"] == {"_high": [(2, False)]} and edges["_high"] == {"_low": [(1, True)]}
    assert circles(edges) == [["_high", "_low"]]
    assert "_high" not in edges["_typed"]
    assert unexplained(pkg) == ["_low.py:2: from ._high import g"]
