"""docs/pypto_examples.md and the README agree, and the runner changes only the two spellings."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _runner():
    spec = importlib.util.spec_from_file_location("pypto_examples", ROOT / "benchmarks" / "pypto_examples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_readme_count_is_the_table_count():
    doc = (ROOT / "docs" / "pypto_examples.md").read_text()
    rows = re.findall(r"^\| `([^`]+\.py)` \| [^|]+ \| (runs|fails) \|", doc, re.MULTILINE)
    assert len(rows) == 41 and len({path for path, _ in rows}) == 41
    runs = sum(status == "runs" for _, status in rows)
    assert f"**{runs} of 41 run unchanged.**" in doc
    assert f"41 files), {runs} run here unchanged" in (ROOT / "README.md").read_text()
    for path, status in rows:  # a failing example says where it stops
        line = next(ln for ln in doc.splitlines() if ln.startswith(f"| `{path}` "))
        assert (status == "fails") == bool(line.split("|")[4].strip()), line


def test_the_runner_changes_only_the_import_and_the_platform():
    adapt = _runner().adapt
    src = (
        "import pypto.language as pl\n"
        "from pypto import ir\n"
        "from pypto.runtime import RunConfig\n"
        "    import pypto.runtime\n"
        "cfg = RunConfig(platform='a2a3sim')\n"
        'choices=["a2a3sim", "a5sim", "a2a3", "a5"]\n'
        "x = 'pypto.language'  # a5 and a2a3 in a comment stay\n"
        "import pyptox\n"
    )
    assert adapt(src) == (
        "import pypto_async.language as pl\n"
        "from pypto_async import ir\n"
        "from pypto_async.runtime import RunConfig\n"
        "    import pypto_async.runtime\n"
        'cfg = RunConfig(platform="sim")\n'
        'choices=["sim", "sim", "sim", "sim"]\n'
        "x = 'pypto.language'  # a5 and a2a3 in a comment stay\n"
        "import pyptox\n"
    )
