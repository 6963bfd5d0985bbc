"""``debug/run.py``: a script beside every compiled artifact that runs it again on the simulator.

PyPTO's ``compile()`` leaves a runnable harness in ``<output_dir>/debug/run.py``
so a build directory can be re-run without the code that made it.  Here the
script loads the artifact directory it sits in (``ir.CompiledProgram.from_dir``),
makes each parameter from its shape and dtype in ``_inline_inputs`` (random
floats, zero integers, zero outputs, scalars 1 or the value the artifact was
compiled for: edit them to try others),
launches it and prints the outputs.  ``python <output_dir>/debug/run.py --seed 3``.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._signature import IN, OUT, SCALAR

__all__ = ["write_run_script", "RUN_SCRIPT"]

#: Where the script goes, under the artifact directory.
RUN_SCRIPT = Path("debug") / "run.py"

_TORCH = {"FP32": "float32", "FP64": "float64", "FP16": "float16", "BF16": "bfloat16", "INT8": "int8",
          "INT16": "int16", "INT32": "int32", "INT64": "int64", "UINT8": "uint8", "BOOL": "bool",
          "FP8E4M3FN": "float8_e4m3fn", "FP8E5M2": "float8_e5m2"}


def _init(p, specialised: dict) -> str:
    """The expression that makes parameter ``p`` in the script."""
    if p.name in specialised:  # compiled in: a launch passes that value
        return repr(specialised[p.name])
    if p.direction == SCALAR:
        return "1.0" if p.dtype.is_float else "1"
    shape = "(" + ", ".join(str(d) for d in p.shape) + ("," if len(p.shape) == 1 else "") + ")"
    dtype = f"torch.{_TORCH.get(p.dtype.name, p.dtype.np_storage.name)}"
    if p.direction == OUT or not p.dtype.is_float:
        return f"torch.zeros({shape}, dtype={dtype})"
    if p.dtype.name.startswith("FP8"):
        return f"torch.randn({shape}, generator=g).to({dtype})"
    return f"torch.randn({shape}, dtype={dtype}, generator=g)"


def render(program) -> str:
    """The text of ``debug/run.py`` for a lowered ``program``."""
    fixed = dict(getattr(program, "specialised", ()))
    inputs = "\n".join(f"        {p.name!r}: {_init(p, fixed)},  # {p.direction} {p.dtype.name}{list(p.shape)}"
                       + ("; compiled for this value" if p.name in fixed else "") for p in program.params)
    outputs = [p.name for p in program.params if p.direction not in (SCALAR, IN)]
    return f'''"""Run the compiled program {program.name!r} (the directory above this script) on the simulator.

Written by pypto_async.ir.compile.  _inline_inputs makes each parameter from
its shape and dtype (random floats, zero integers and outputs, scalars 1, or
the value a specialised scalar was compiled for); edit it to try other data.  Usage: python debug/run.py [--seed N]
"""

import argparse
from pathlib import Path

import torch

from pypto_async import ir

ARTIFACT = Path(__file__).resolve().parent.parent
OUTPUTS = {outputs!r}


def _inline_inputs(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {{
{inputs}
    }}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description="Run {program.name} on the simulator.")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    args = parser.parse_args(argv)
    compiled = ir.CompiledProgram.from_dir(ARTIFACT)
    values = _inline_inputs(args.seed)
    compiled(*values.values())
    for name in OUTPUTS:
        print(f"{{name}}: {{tuple(values[name].shape)}} {{values[name].dtype}}")
        print(values[name])
    return values


if __name__ == "__main__":
    main()
'''


def write_run_script(target, program) -> Path | None:
    """Write ``<target>/debug/run.py`` for ``program`` (atomically); None where the directory is not writable."""
    path = Path(target) / RUN_SCRIPT
    text = render(program)
    try:
        if path.exists() and path.read_text(encoding="utf-8") == text:
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".run.py.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        return None
    return path
