"""benchmarks/pypto_examples.py's adapter changes the import only, and the adapted names still resolve."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "pypto_examples.py"
_spec = importlib.util.spec_from_file_location("pypto_examples", _PATH)
examples = importlib.util.module_from_spec(_spec)
sys.modules.setdefault(_spec.name, examples)  # its dataclasses look their module up
_spec.loader.exec_module(examples)

SOURCE = '''\
import os
import pypto
import pypto  # the package itself
import pypto.language as pl
from pypto import ir
from pypto.backend.pto_backend import PartialCodegenError

def f():
    import pypto
    return pypto.ir.Program, pypto.language, pl.FunctionType, ir.Function, PartialCodegenError

platform = "a2a3sim"
'''


def test_a_bare_import_of_pypto_binds_pypto_to_the_package():
    out = examples.adapt(SOURCE)
    assert out.splitlines() == [
        "import os",
        "import pypto_async as pypto",
        "import pypto_async as pypto  # the package itself",
        "import pypto_async.language as pl",
        "from pypto_async import ir",
        "from pypto_async.backend.pto_backend import PartialCodegenError",
        "",
        "def f():",
        "    import pypto_async as pypto",
        "    return pypto.ir.Program, pypto.language, pl.FunctionType, ir.Function, PartialCodegenError",
        "",
        'platform = "sim"',
    ]
    ns: dict = {}
    exec(compile(out, "<adapted>", "exec"), ns)  # noqa: S102 - the adapted example
    import pypto_async
    from pypto_async.backend.pto_backend import PartialCodegenError

    assert ns["pypto"] is pypto_async
    assert ns["f"]() == (pypto_async.ir.Program, pypto_async.language, pypto_async.ir.FunctionType,
                         pypto_async.ir.Function, PartialCodegenError)


def test_names_that_only_start_with_pypto_are_left_alone():
    src = "import pypto_extra\nimport pyptoish\nx = 'import pypto'\n"
    assert examples.adapt(src) == src
