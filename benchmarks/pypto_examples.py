"""Run PyPTO's own example programs against pypto_async, unchanged but for two spellings.

Given a directory holding copies of PyPTO's example files (its ``examples/``
tree or any part of it), this script makes a scratch copy of each file with

1. the import switched from ``pypto`` to ``pypto_async`` (``import pypto.x``,
   ``from pypto.x import``, ``from pypto import``; a bare ``import pypto``
   becomes ``import pypto_async as pypto``, so the file's ``pypto.x``
   references keep naming the package), and
2. every platform string (``"a2a3sim"``, ``"a5sim"``, ``"a2a3"``, ``"a5"``)
   replaced by ``"sim"``,

runs it as ``__main__`` in a fresh interpreter, and prints one line per file:
``pass`` when it exits 0, else ``FAIL`` with the last line of its error.  An
example checks its own results against torch where it has a reference, so a
pass means it ran and matched.  Many of PyPTO's older examples only define
``@pl.program`` classes (or print them); with ``--programs`` each such class
at module level is also compiled and launched once on random inputs, and the
line says how many ran (outputs poisoned with NaN, and checked written and
finite; there is no reference to compare with).  The files are not part of
this project; fetch them yourself.  docs/pypto_examples.md lists the outcome
per file.

    python3 benchmarks/pypto_examples.py /path/to/pypto/examples [--programs] [--timeout 300]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

_BARE = re.compile(r"^(\s*)import\s+pypto(?=[ \t]*(?:#.*)?$)", re.MULTILINE)
_IMPORT = re.compile(r"^(\s*(?:from|import)\s+)pypto(?=[\s.])", re.MULTILINE)
_PLATFORM = re.compile(r"""(["'])(?:a2a3sim|a5sim|a2a3|a5)\1""")


def adapt(source: str) -> str:
    """Return ``source`` with the two substitutions applied (and nothing else)."""
    source = _BARE.sub(r"\1import pypto_async as pypto", source)
    return _PLATFORM.sub('"sim"', _IMPORT.sub(r"\1pypto_async", source))


def examples(root: Path) -> list[Path]:
    """The example files under ``root`` (``__init__.py`` files excluded), sorted."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*.py") if p.name != "__init__.py")


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


def _env(repo: Path) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])))


def _child(argv: list[str], scratch: Path, repo: Path, timeout: float) -> tuple[bool, str]:
    try:
        proc = subprocess.run([sys.executable, *argv], cwd=scratch, env=_env(repo),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:g} s"
    if proc.returncode == 0:
        return True, proc.stdout.strip()
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return False, lines[-1] if lines else f"exit status {proc.returncode}"


def run_one(path: Path, scratch: Path, repo: Path, timeout: float, programs: bool = False) -> tuple[bool, str]:
    """Run one adapted example; return (passed, last error line or, with `programs`, what ran)."""
    target = scratch / path.name
    target.write_text(adapt(path.read_text()))
    ok, why = _child([str(target)], scratch, repo, timeout)
    if not ok or not programs:
        return ok, "" if ok else why
    ok, out = _child(["-c", _PROGRAMS, str(target)], scratch, repo, timeout)
    if not ok:
        return False, f"its programs: {out}"
    count = out.splitlines()[-1]
    return True, f"{count} program(s) compiled and ran" if count != "0" else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a directory of PyPTO example files (or one file)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per example")
    parser.add_argument("--programs", action="store_true",
                        help="also compile and launch each module-level @pl.program on random inputs")
    args = parser.parse_args(argv)
    repo = Path(__file__).resolve().parent.parent
    files = examples(args.root)
    passed = 0
    for path in files:
        with tempfile.TemporaryDirectory(prefix="pypto_example_") as tmp:
            ok, why = run_one(path, Path(tmp), repo, args.timeout, args.programs)
        passed += ok
        name = path.relative_to(args.root) if args.root.is_dir() else path.name
        print(f"{'pass' if ok else 'FAIL'}  {name}" + (f"  -- {why}" if why else ""), flush=True)
    print(f"{passed} of {len(files)} ran unchanged")
    return 0 if passed == len(files) else 1


if __name__ == "__main__":
    sys.exit(main())
