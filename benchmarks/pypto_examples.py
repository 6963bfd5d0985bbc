"""Run PyPTO's own programs against pypto_async, unchanged but for the import and the platform.

Given a PyPTO checkout (a directory holding ``docs/en/user`` and ``examples/``), the programs are

* every file under ``examples/`` (all folders, recursively; ``__init__.py`` excluded), and
* every runnable code block of the user guide ``docs/en/user``.  A runnable block is the
  one PyPTO's own doc runner executes: a ```` ```python ```` fence on the line after an HTML
  comment ``<!-- doctest: run -->``; it runs after every ``<!-- doctest: setup -->`` block
  of its page, joined in page order, with ``__PLATFORM__`` standing for the platform.
  Unmarked blocks are fragments and are not programs.

Given any other directory (a folder of example files) or one file, the programs are its
``.py`` files.  Each program is copied to a scratch place with

1. the import switched from ``pypto`` to ``pypto_async`` (``import pypto.x``,
   ``from pypto.x import``, ``from pypto import``; a bare ``import pypto`` becomes
   ``import pypto_async as pypto`` so that qualified ``pypto.x`` names still resolve), and
2. every platform string (``"a2a3sim"``, ``"a5sim"``, ``"a2a3"``, ``"a5"``) replaced by ``"sim"``,

and run as ``__main__`` in a fresh interpreter (a file that imports its siblings relatively,
such as ``models/qwen3_jit``, runs with ``-m`` from its package).  One line per program says:
``matched`` when it exits 0 and has a check of its own (it asserts, or compares with a torch
or numpy reference), ``ran`` when it exits 0 with nothing to compare, or ``FAIL`` with the
first error (the exception it ended with).  A file only imported by other examples is part of
their program, not one of its own: it is run by importing it (``module`` when that works) and
counted apart.  Counts per folder follow; the exit status is 0 when every program ran.  With
``--programs`` each module-level ``@pl.program`` class of a file is also compiled and launched
once on random inputs (outputs poisoned with NaN, and checked written and finite).

``--markdown PAGE`` writes docs/pypto_examples.md from the results (and ``--readme README``
rewrites the README's paragraph that counts them); ``--commit`` names the PyPTO commit when the
checkout is not a git repository.  The programs are PyPTO's, not part of this project.

    python3 benchmarks/pypto_examples.py /path/to/pypto [--timeout 300] [--jobs 2]
        [--markdown docs/pypto_examples.md --readme README.md --commit HASH]
    python3 benchmarks/pypto_examples.py /path/to/pypto/examples/beginner [--programs]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

_IMPORT = re.compile(r"^(\s*(?:from|import)\s+)pypto(?=[\s.])", re.MULTILINE)
_BARE_IMPORT = re.compile(r"^([ \t]*)import[ \t]+pypto(?=[ \t]*(?:$|#))", re.MULTILINE)
_PLATFORM = re.compile(r"""(["'])(?:a2a3sim|a5sim|a2a3|a5)\1""")

PLATFORM = "sim"
DOCS = Path("docs", "en", "user")


def adapt(source: str) -> str:
    """Return ``source`` with the import and platform substitutions applied (and nothing else)."""
    source = _BARE_IMPORT.sub(r"\1import pypto_async as pypto", source)
    return _PLATFORM.sub(f'"{PLATFORM}"', _IMPORT.sub(r"\1pypto_async", source))


# ---------------------------------------------------------------------------------------------
# What the programs are

# The doc runner's marker: the comment, then only white space (blank lines too) up to the end of a
# line, then a fence opening exactly "```python"; the code runs to the next line starting "```".
_BLOCK = re.compile(r"<!--\s*doctest:\s*(setup|run)\s*-->\s*\n```python\n(.*?)\n```", re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One marked block of a page: ``kind`` is ``"setup"`` or ``"run"``; ``line`` is 1-based."""

    kind: str
    code: str
    line: int


def blocks(text: str) -> list[Block]:
    """The marked blocks of a markdown page, in page order."""
    return [Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in _BLOCK.finditer(text)]


def block_program(page: list[Block], run: Block) -> str:
    """The program a run block is: the page's setup blocks, then the block, platform filled in."""
    setup = "\n".join(b.code for b in page if b.kind == "setup")
    source = f"{setup}\n\n{run.code}\n" if setup else f"{run.code}\n"
    return source.replace("__PLATFORM__", PLATFORM)


@dataclass(frozen=True)
class Program:
    """One program to run: ``name`` as listed, ``folder`` it is counted under, its adapted source."""

    name: str
    folder: str
    source: str
    module: str = ""  # dotted name to run with -m (a file inside a package that imports relatively)
    package: str = ""  # with module: the outermost package directory, staged adapted for -m
    part_of: str = ""  # for a file only imported by other examples: the ones that import it


def is_checkout(root: Path) -> bool:
    """Whether ``root`` is a PyPTO checkout (user guide and examples), not a folder of files."""
    return (root / DOCS).is_dir() and (root / "examples").is_dir()


def example_files(root: Path) -> list[Path]:
    """The example files under ``root`` (``__init__.py`` files excluded), sorted."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*.py") if p.name != "__init__.py")


_RELATIVE = re.compile(r"^[ \t]*from[ \t]+(\.+)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[\w \t,]+)", re.MULTILINE)


def _relative_targets(path: Path, source: str) -> set[Path]:
    """The files that ``path`` imports relatively (``from .x import``, ``from ..y import z``)."""
    out = set()
    for dots, name, names in _RELATIVE.findall(source):
        base = path.parent
        for _ in range(len(dots) - 1):
            base = base.parent
        target = base.joinpath(*name.split(".")) if name else base
        candidates = [target.with_suffix(".py")] if name else []
        candidates += [target / (n.strip() + ".py") for n in re.split(r"[\s,()]+", names) if n.strip()]
        out.update(c for c in candidates if c.is_file())
    return out


def _package_root(path: Path) -> Path:
    """The directory above the outermost package holding ``path``."""
    top = path.parent
    while (top / "__init__.py").is_file():
        top = top.parent
    return top


def _programs_importing(path: Path, importers: dict[Path, list[Path]]) -> set[Path]:
    """The files, themselves imported by none, that import ``path`` (directly or through others)."""
    out, seen, todo = set(), set(), list(importers.get(path, []))
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            if importers.get(p):
                todo.extend(importers[p])
            else:
                out.add(p)
    return out


def file_programs(root: Path, base: Path | None = None) -> list[Program]:
    """The example files under ``root``, each a program named relative to ``base``."""
    files = example_files(root)
    base = base or (root if root.is_dir() else root.parent)
    sources = {p: p.read_text(encoding="utf-8") for p in files}
    importers: dict[Path, list[Path]] = {}
    for p, src in sources.items():
        for t in _relative_targets(p, src):
            importers.setdefault(t, []).append(p)
    out = []
    for p in files:
        name = p.relative_to(base).as_posix()
        folder = str(Path(name).parent.as_posix()) if "/" in name else "."
        module = package = ""
        if _RELATIVE.search(sources[p]) and (p.parent / "__init__.py").is_file():
            module = ".".join(p.relative_to(_package_root(p)).with_suffix("").parts)
            package = str(_package_root(p) / module.split(".")[0])
        part_of = ", ".join(sorted(i.relative_to(base).as_posix() for i in _programs_importing(p, importers)))
        out.append(Program(name, folder, adapt(sources[p]), module, package, part_of))
    return out


def doc_programs(root: Path) -> list[Program]:
    """Every runnable block under ``root / docs/en/user``, each with its page's setup."""
    out = []
    for page in sorted((root / DOCS).rglob("*.md")):
        marked = blocks(page.read_text(encoding="utf-8"))
        rel = page.relative_to(root).as_posix()
        for b in marked:
            if b.kind == "run":
                out.append(Program(f"{rel}:{b.line}", Path(rel).parent.as_posix(), adapt(block_program(marked, b))))
    return out


def programs(root: Path) -> list[Program]:
    """The programs of ``root``: a checkout's examples and doc blocks, or a folder's files."""
    if is_checkout(root):
        return file_programs(root / "examples", root) + doc_programs(root)
    return file_programs(root)


# ---------------------------------------------------------------------------------------------
# Running them

# Run in a child: import the adapted example (not as __main__), then compile and launch every
# @pl.program class it defines at module level, on random inputs with NaN-poisoned outputs.
_PROGRAMS = """
import importlib.util, sys
import numpy as np
from pypto_async import ir
from pypto_async.runtime import ChipWorker, RunConfig
spec = importlib.util.spec_from_file_location("example", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
progs = {id(v): v for v in vars(mod).values() if getattr(v, "__pl_program__", False)}
rng = np.random.default_rng(0)
with ChipWorker(config=RunConfig()) as worker:
    for prog in progs.values():
        c = ir.compile(prog)
        args = []
        for p in c.params:
            dt = p.dtype.np_storage
            if p.direction == "scalar":
                args.append(1.5 if p.dtype.is_float else 3)
            elif p.direction == "out":
                args.append(np.full(p.shape, np.nan, dt) if p.dtype.is_float else np.zeros(p.shape, dt))
            else:
                args.append((rng.random(p.shape) + 0.5).astype(dt))
        worker.run(c, *args)  # sync mode: returns once the launch completed
        for p, a in zip(c.params, args):
            if p.direction in ("out", "inout") and p.dtype.is_float and not np.isfinite(a).all():
                raise SystemExit(f"{prog.name}: output {p.name} not written or not finite")
print(len(progs))
"""

# A program checks its own result when it asserts, compares with a reference, or exits non-zero
# on a mismatch.
_CHECKS = re.compile(r"\bassert\b|allclose|assert_close|np\.testing|torch\.testing|\bgolden\b|sys\.exit\(\s*[^0)]")


def has_check(source: str) -> bool:
    """Whether ``source`` checks its own result (so exiting 0 means it matched)."""
    return bool(_CHECKS.search(source))


@dataclass(frozen=True)
class Result:
    """What running one program showed: ``outcome`` is matched / ran / module / FAIL.

    ``part_of`` names the programs a file is only imported by (a module, counted with them).
    """

    name: str
    folder: str
    outcome: str
    detail: str = ""
    part_of: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome != "FAIL"


#: Devices the simulator offers the programs: PyPTO's examples run on device ids up to 15 (an a2a3 host's 16 NPUs).
SIM_DEVICES = "16"


def _env(repo: Path, extra: Path) -> dict:
    paths = [str(repo), str(extra), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, paths)), MPLBACKEND="Agg")
    env.setdefault("PYPTO_ASYNC_SIM_DEVICES", SIM_DEVICES)
    return env


def first_error(stderr: str, stdout: str, returncode: int, limit: int = 300) -> str:
    """The error a failed child ended with: its exception (and message), else its last words."""
    lines = stderr.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")]
    if starts:  # the exception is the first unindented line after the frames of the last traceback
        rest = lines[starts[-1] + 1:]
        at = next((i for i, ln in enumerate(rest) if ln.strip() and not ln.startswith(" ")), None)
        if at is not None:
            text = " ".join(ln.strip() for ln in rest[at:] if ln.strip())
            return text if len(text) <= limit else text[:limit - 3] + "..."
    tail = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    tail = tail or [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    return tail[-1][:limit] if tail else f"exit status {returncode}"


def _child(argv: list[str], cwd: Path, repo: Path, extra: Path, timeout: float) -> tuple[bool, str]:
    try:
        proc = subprocess.run([sys.executable, *argv], cwd=cwd, env=_env(repo, extra),
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:g} s"
    if proc.returncode == 0:
        return True, proc.stdout.strip()
    return False, first_error(proc.stderr, proc.stdout, proc.returncode)


def run_program(prog: Program, scratch: Path, repo: Path, timeout: float, with_programs: bool = False) -> Result:
    """Run one adapted program in a fresh interpreter and say what it showed."""
    with tempfile.TemporaryDirectory(prefix="pypto_program_") as tmp:
        cwd = Path(tmp)
        target = cwd / (Path(prog.name.split(":")[0]).stem.replace("-", "_") + ".py")
        target.write_text(prog.source)
        argv = ["-m", prog.module] if prog.module else [str(target)]
        ok, out = _child(argv, cwd, repo, scratch / "pkg", timeout)
        if not ok:
            return Result(prog.name, prog.folder, "FAIL", out, prog.part_of)
        if prog.part_of:
            return Result(prog.name, prog.folder, "module", "", prog.part_of)
        outcome = "matched" if has_check(prog.source) else "ran"
        if not with_programs or prog.module:
            return Result(prog.name, prog.folder, outcome)
        ok, out = _child(["-c", _PROGRAMS, str(target)], cwd, repo, scratch / "pkg", timeout)
    if not ok:
        return Result(prog.name, prog.folder, "FAIL", f"its programs: {out}")
    count = out.splitlines()[-1] if out else "0"
    return Result(prog.name, prog.folder, outcome, f"{count} @pl.program(s) compiled and ran" if count != "0" else "")


def run_all(progs: list[Program], repo: Path, timeout: float, jobs: int = 1, with_programs: bool = False,
            report=None) -> list[Result]:
    """Run every program (``jobs`` at a time); ``report(result)`` is called as each finishes, in order."""
    with tempfile.TemporaryDirectory(prefix="pypto_examples_") as tmp:
        scratch = Path(tmp)
        (scratch / "pkg").mkdir()
        for top in sorted({p.package for p in progs if p.package}):  # packages run with -m, adapted
            for src in Path(top).rglob("*.py"):
                dest = scratch / "pkg" / Path(top).name / src.relative_to(top)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(adapt(src.read_text(encoding="utf-8")))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(run_program, p, scratch, repo, timeout, with_programs) for p in progs]
            results = []
            for f in futures:
                results.append(f.result())
                if report:
                    report(results[-1])
    return results


# ---------------------------------------------------------------------------------------------
# What failed on what: a failure's first error, read as the missing feature that stopped it.
# First match wins; an error no pattern knows is listed under its own text.

BLOCKERS: list[tuple[str, str]] = [
    (r"timed out after", "ran past the time limit"),
    (r"pypto_async\.language\.distributed|distributed_compiled_program|DistributedWorker|DistributedConfig",
     "distributed programs (`pypto.language.distributed`, `DistributedWorker`, `DistributedConfig`)"),
    (r"pypto_async\.ir\.pass_manager", "`pypto.ir.pass_manager` (`OptimizationStrategy`)"),
    (r"pypto_async\.backend\.pto_backend|PartialCodegenError", "`pypto.backend.pto_backend` (`PartialCodegenError`)"),
    (r"pypto_async\.debug", "`pypto.debug` (`torch_codegen`)"),
    (r"does not support item assignment|subscript assignment", "tensor subscript assignment `out[...] = expr`"),
    (r"has no attribute 'read'", "runtime scalars: `pl.read`"),
    (r"has no attribute 'unroll'", "`pl.unroll`"),
    (r"has no attribute 'pipeline'", "`pl.pipeline`"),
    (r"has no attribute '(split|SplitMode)'", "mixed kernels: `pl.at(optimizations=[pl.split(...)])`"),
    (r"has no attribute 'inline'", "`@pl.jit.inline`"),
    (r"has no attribute 'dynamic'", "`pl.dynamic` (dynamic dimensions)"),
    (r"language' has no attribute 'tensor'", "the `pl.tensor.*` op namespace"),
    (r"no_dep_args", "`pl.at(no_dep_args=)`"),
    (r"allow_early_resolve", "`pl.at(allow_early_resolve=)`"),
    (r"manual_dep", "`pl.create_tensor(manual_dep=)`"),
    (r"auto_scope|has no attribute '(scope|array|TASK_ID)'", "`pl.jit(auto_scope=)`, `pl.scope`, `pl.array`"),
    (r"ir' has no attribute 'Function'|has no attribute '(func_type|lower)'|as_python",
     "the IR view (`ir.Function`, `.func_type`, `kernel.lower`)"),
    (r"takes \d+ arguments? \([^)]*\), got 0", "`kernel.compile()` with no arguments (a static signature)"),
    (r"Opaque", "several `FunctionType.Opaque` entries in one program"),
    (r"No module named 'pypto_async[\w.]*'|cannot import name", "a PyPTO module or name not here"),
    (r"has no attribute '\w+'", "a PyPTO name not here"),
]


def blocker(detail: str) -> str:
    """The missing feature a failure's first error names (or the error itself)."""
    for pattern, label in BLOCKERS:
        if re.search(pattern, detail):
            return label
    return "other: " + detail


# ---------------------------------------------------------------------------------------------
# The page

_TITLE = "# PyPTO's programs on pypto_async"
_ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| (?P<outcome>matched|ran|module|FAIL) \| (?P<part>.*?) \| (?P<detail>.*?) \|$",
                  re.MULTILINE)


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _unesc(text: str) -> str:
    return text.replace("\\|", "|")


def counts(results: list[Result]) -> dict[str, Counter]:
    """Outcome counts of the programs per folder (modules under ``"module"``), in first-seen order."""
    out: dict[str, Counter] = {}
    for r in results:
        out.setdefault(r.folder, Counter())["module" if r.part_of else r.outcome] += 1
    return out


def summary(results: list[Result]) -> tuple[int, int, int, int]:
    """(programs that ran, programs, of which doc blocks ran, doc blocks); modules are not programs."""
    progs = [r for r in results if not r.part_of]
    docs = [r for r in progs if ":" in r.name]
    return sum(r.ok for r in progs), len(progs), sum(r.ok for r in docs), len(docs)


def render(results: list[Result], commit: str) -> str:
    """The docs/pypto_examples.md page for ``results``, measured at PyPTO ``commit``."""
    ok, total, dok, dtotal = summary(results)
    files = [r for r in results if ":" not in r.name and not r.part_of]
    fok, nfiles = sum(r.ok for r in files), sum(":" not in r.name for r in results)
    lines = [
        _TITLE,
        "",
        f"Measured against PyPTO's main branch at commit `{commit}`: every file under its `examples/`",
        "(all folders) and every runnable code block of its user guide `docs/en/user` (a block marked",
        "`<!-- doctest: run -->`, run after its page's `<!-- doctest: setup -->` blocks, as PyPTO's own doc",
        "runner does). Each program ran with two substitutions only: the import (`pypto` becomes",
        "`pypto_async`) and the platform (`\"a2a3sim\"`, `\"a5sim\"`, `\"a2a3\"`, `\"a5\"` and `__PLATFORM__`",
        "become `\"sim\"`). The programs are PyPTO's, not part of this project. This page is generated:",
        "`python3 benchmarks/pypto_examples.py PYPTO_CHECKOUT --markdown docs/pypto_examples.md --readme README.md`.",
        "",
        "Outcomes: **matched**: it exited cleanly and it checks its own result (it asserts, or compares",
        "with a torch reference), so it ran and matched; **ran**: it exited cleanly with nothing to",
        "compare; **FAIL**: the first error it ended with. A file only imported by another example is part",
        "of that program (the \"Part of\" column), not a program of its own: it is imported here on its",
        "own (**module** when that works) and counted with its program.",
        "",
        f"**{ok} of {total} programs run** ({fok} of {len(files)} example programs ({nfiles} files), "
        f"{dok} of {dtotal} doc blocks).",
        "",
        "| Folder | Programs | matched | ran | FAIL | modules |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for folder, c in counts(results).items():
        n = c["matched"] + c["ran"] + c["FAIL"]
        lines.append(f"| `{folder}` | {n} | {c['matched']} | {c['ran']} | {c['FAIL']} | {c['module']} |")
    fails = [r for r in results if not r.ok and not r.part_of]
    groups = Counter(blocker(r.detail) for r in fails)
    lines += ["", "## What stops the failing programs", "",
              "Each failure's first error, read as the missing feature it names (most first):", ""]
    for label, n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
        names = ", ".join(f"`{r.name}`" for r in fails if blocker(r.detail) == label)
        lines.append(f"- {_esc(label)} ({n}): {names}")
    if not fails:
        lines.append("- none")
    lines += ["", "## Per program", "", "| Program | Outcome | Part of | First error (or note) |",
              "| --- | --- | --- | --- |"]
    lines += [f"| `{r.name}` | {r.outcome} | {_esc(r.part_of)} | {_esc(r.detail)} |" for r in results]
    return "\n".join(lines) + "\n"


def parse(page: str) -> tuple[list[Result], str]:
    """The results and commit a rendered page holds (``render(*parse(page)) == page`` for a page it made)."""
    commit = re.search(r"at commit `([0-9a-f]+)`", page)
    table = page.split("## Per program", 1)[-1]
    results = []
    for m in _ROW.finditer(table):
        name = m.group("name")
        if ":" in name:
            folder = Path(name.split(":")[0]).parent.as_posix()
        else:
            folder = Path(name).parent.as_posix()
            folder = folder if "/" in name else "."
        results.append(Result(name, folder, m.group("outcome"), _unesc(m.group("detail")), _unesc(m.group("part"))))
    return results, commit.group(1) if commit else ""


_README = re.compile(r"Of PyPTO's .*?\(\[`docs/pypto_examples\.md`\]\(docs/pypto_examples\.md\)\)\.", re.DOTALL)


def readme_paragraph(results: list[Result], commit: str) -> str:
    """The README's sentence that counts PyPTO's programs that run here."""
    ok, total, dok, dtotal = summary(results)
    files = [r for r in results if ":" not in r.name and not r.part_of]
    text = (f"Of PyPTO's own programs on its main branch (commit `{commit[:9]}`: the {len(files)} example "
            f"programs under its `examples/` and the {dtotal} runnable code blocks of its user guide), {ok} of "
            f"{total} run here unchanged but for the import and the platform ({sum(r.ok for r in files)} "
            f"examples, {dok} doc blocks), and match their own checks where they have one "
            "([`docs/pypto_examples.md`](docs/pypto_examples.md)).")
    return textwrap.fill(text, width=105, break_on_hyphens=False, break_long_words=False)


def update_readme(readme: str, results: list[Result], commit: str) -> str:
    """``readme`` with its counting paragraph rewritten for ``results`` (and nothing else changed)."""
    new, n = _README.subn(lambda _m: readme_paragraph(results, commit), readme, count=1)
    if n != 1:
        raise ValueError("README has no paragraph starting \"Of PyPTO's\" that links docs/pypto_examples.md")
    return new


def _commit(root: Path, given: str | None) -> str:
    if given:
        return given
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _line(r: Result) -> str:
    return f"{r.outcome:<7}  {r.name}" + (f"  -- {r.detail}" if r.detail else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a PyPTO checkout, a directory of PyPTO example files, or one file")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per program")
    parser.add_argument("--jobs", type=int, default=1, help="programs run at once")
    parser.add_argument("--programs", action="store_true",
                        help="also compile and launch each module-level @pl.program on random inputs")
    parser.add_argument("--only", default="", help="run only programs whose name contains this")
    parser.add_argument("--markdown", type=Path, help="write the results page here (docs/pypto_examples.md)")
    parser.add_argument("--readme", type=Path, help="rewrite this README's paragraph that counts the programs")
    parser.add_argument("--commit", help="the PyPTO commit measured (default: git rev-parse HEAD in root)")
    args = parser.parse_args(argv)
    repo = Path(__file__).resolve().parent.parent
    progs = [p for p in programs(args.root) if args.only in p.name]
    results = run_all(progs, repo, args.timeout, args.jobs, args.programs,
                      report=lambda r: print(_line(r), flush=True))
    print()
    for folder, c in counts(results).items():
        n = c["matched"] + c["ran"] + c["FAIL"]
        mods = f", {c['module']} module(s)" if c["module"] else ""
        print(f"{folder}: {n - c['FAIL']} of {n} ran ({c['matched']} matched, {c['ran']} ran, {c['FAIL']} failed{mods})")
    ok, total, dok, dtotal = summary(results)
    print(f"{ok} of {total} programs ran unchanged" + (f" ({dok} of {dtotal} doc blocks)" if dtotal else ""))
    if args.markdown or args.readme:
        commit = _commit(args.root, args.commit)
        if args.markdown:
            args.markdown.write_text(render(results, commit))
        if args.readme:
            args.readme.write_text(update_readme(args.readme.read_text(), results, commit))
    return 0 if ok == total else 1


if __name__ == "__main__":
    sys.exit(main())
