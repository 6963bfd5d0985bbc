"""The debug re-runner every compile leaves at ``<output_dir>/debug/run.py`` (PyPTO's ``debug/`` harness).

The script is self-contained: it rebuilds the handle from its parent
directory (:meth:`CompiledProgram.from_dir`), makes the inputs in
``_inline_inputs`` (random values of each parameter's shape and dtype, the
``Out`` parameters zeros), launches the program on the simulator, and calls
``_user_compare`` with the arguments after the run.  Both functions are the
user's to edit.  Run it as ``python <output_dir>/debug/run.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._signature import INOUT, OUT, SCALAR, ParamSpec

RUN_SCRIPT = Path("debug") / "run.py"

_HEADER = '''"""Debug re-runner for {name!r}, written by pypto_async.ir.compile.

    python {{this_file}}

rebuilds the compiled program from the directory above this one, makes its
arguments in ``_inline_inputs`` (edit them freely), runs it on the simulator
and hands the arguments, outputs filled in, to ``_user_compare`` (write your
own checks there).
"""

import sys
from pathlib import Path

import torch

from pypto_async.ir import CompiledProgram

_WORK_DIR = Path(__file__).resolve().parent.parent


def _inline_inputs():
    """The arguments, in call order, from the shapes and dtypes of the signature."""
'''

_FOOTER = '''

def _user_compare({names}):
    """Your checks, after the run: the outputs hold the kernel's results."""
    return


def main():
    """Run the program once on `_inline_inputs()`; return the arguments after the run."""
    compiled = CompiledProgram.from_dir(_WORK_DIR)
    args = _inline_inputs()
    compiled(*args)
    _user_compare(*args)
    return args


if __name__ == "__main__":
    for _name, _value in zip({names_list!r}, main()):
        print(_name, tuple(_value.shape) if hasattr(_value, "shape") else _value)
    sys.exit(0)
'''


def _init_line(p: ParamSpec) -> str:
    if p.direction == SCALAR:
        value = "0.0" if p.dtype.is_float else "0"
        return f"{p.name} = {value}  # a scalar: set its value"
    dtype = f"getattr(torch, {p.dtype.np_name!r})"
    shape = tuple(int(d) for d in p.shape)
    if p.direction == OUT:
        return f"{p.name} = torch.zeros({shape!r}, dtype={dtype})"
    note = "" if p.direction != INOUT else "  # in and out"
    if p.dtype.name == "BOOL":
        return f"{p.name} = torch.randint(0, 2, {shape!r}).to({dtype}){note}"
    if not p.dtype.is_float:
        return f"{p.name} = torch.randint(0, 8, {shape!r}).to({dtype}){note}"
    if p.dtype.itemsize == 1:  # FP8: made in FP32, cast
        return f"{p.name} = torch.randn({shape!r}, dtype=torch.float32).to({dtype}){note}"
    return f"{p.name} = torch.randn({shape!r}, dtype={dtype}){note}"


def render(name: str, params) -> str:
    """The text of the re-runner for a program `name` with parameters `params` (:class:`ParamSpec`)."""
    params = list(params)
    body = "\n".join("    " + _init_line(p) for p in params)
    names = ", ".join(p.name for p in params)
    return (_HEADER.format(name=name) + (body + "\n" if body else "")
            + f"    return [{names}]\n" + _FOOTER.format(names=names, names_list=[p.name for p in params]))


def write_run_script(target: Path, name: str, params) -> Path:
    """Write ``target/debug/run.py`` (atomically: concurrent compiles of one entry race here)."""
    path = Path(target) / RUN_SCRIPT
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".run.py.{os.getpid()}.tmp")
    tmp.write_text(render(name, params), encoding="utf-8")
    os.replace(tmp, path)
    return path
