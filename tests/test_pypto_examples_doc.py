"""benchmarks/pypto_examples.py: what a program is, how it is adapted and run, and the page it writes.

No PyPTO checkout is needed: the checkout here is a small synthetic tree in ``tmp_path``.
"""

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _runner():
    name = "pypto_examples_runner"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "pypto_examples.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up while the class is made
        spec.loader.exec_module(mod)
    return sys.modules[name]


PAGE = textwrap.dedent("""\
    # A page

    <!-- doctest: setup -->
    ```python
    import pypto.language as pl
    CFG = "__PLATFORM__"
    ```

    An unmarked block is a fragment:

    ```python
    raise SystemExit("never run")
    ```

    <!-- doctest: run -->
    ```python
    x = 1
    assert CFG == "sim"
    ```

    <!--doctest:run-->  
    ```python
    y = 2
    ```

    <!-- doctest: run -->
    ```bash
    echo a shell block is not a program
    ```

    <!-- doctest: run -->
    Text between the marker and the fence unmarks it:
    ```python
    raise SystemExit("never run")
    ```

    <!-- doctest: run -->

    ```python
    z = 3
    ```

    <!-- doctest: setup -->
    ```python
    HELPER = 3
    ```
    """)


def test_marked_blocks_are_found_in_page_order_with_their_line():
    blocks = _runner().blocks(PAGE)
    assert [(b.kind, b.line) for b in blocks] == [("setup", 3), ("run", 15), ("run", 21), ("run", 37), ("setup", 43)]
    assert blocks[1].code == 'x = 1\nassert CFG == "sim"'
    assert blocks[2].code == "y = 2"
    assert blocks[3].code == "z = 3"  # blank lines between marker and fence are allowed


def test_a_run_block_runs_after_every_setup_block_of_its_page_with_the_platform_filled_in():
    r = _runner()
    blocks = r.blocks(PAGE)
    assert r.block_program(blocks, blocks[2]) == (
        'import pypto.language as pl\nCFG = "sim"\nHELPER = 3\n\ny = 2\n')
    assert r.block_program([blocks[2]], blocks[2]) == "y = 2\n"  # a page without setup


def test_the_runner_changes_only_the_import_and_the_platform():
    adapt = _runner().adapt
    src = (
        "import pypto.language as pl\n"
        "from pypto import ir\n"
        "from pypto.runtime import RunConfig\n"
        "    import pypto.runtime\n"
        "import pypto\n"
        "    import pypto  # qualified names follow\n"
        "cfg = RunConfig(platform='a2a3sim')\n"
        'choices=["a2a3sim", "a5sim", "a2a3", "a5"]\n'
        "x = 'pypto.language'  # a5 and a2a3 in a comment stay\n"
        "import pyptox\n"
        "import pypto_other\n"
    )
    assert adapt(src) == (
        "import pypto_async.language as pl\n"
        "from pypto_async import ir\n"
        "from pypto_async.runtime import RunConfig\n"
        "    import pypto_async.runtime\n"
        "import pypto_async as pypto\n"
        "    import pypto_async as pypto  # qualified names follow\n"
        'cfg = RunConfig(platform="sim")\n'
        'choices=["sim", "sim", "sim", "sim"]\n'
        "x = 'pypto.language'  # a5 and a2a3 in a comment stay\n"
        "import pyptox\n"
        "import pypto_other\n"
    )


def _checkout(tmp_path: Path) -> Path:
    """A PyPTO-shaped tree: examples (with a package importing relatively) and a user guide page."""
    root = tmp_path / "pypto"
    files = {
        "examples/__init__.py": "",
        "examples/basic/__init__.py": "",
        "examples/basic/checks.py": "import pypto\nassert pypto.__name__ == 'pypto_async'\n",
        "examples/basic/quiet.py": "X = 1\n",
        "examples/basic/breaks.py": "def f():\n    raise ValueError('no such op: pl.frob')\nf()\n",
        "examples/models/__init__.py": "",
        "examples/models/net/__init__.py": "",
        "examples/models/net/config.py": "SIZE = 4\n",
        "examples/models/net/parts/__init__.py": "",
        "examples/models/net/parts/layer.py": "from ..config import SIZE\n\ndef layer():\n    return SIZE\n",
        "examples/models/net/main.py": ("from .config import (\n    SIZE,\n)\nfrom .parts.layer import layer\n"
                                        "assert layer() == SIZE == 4\n"),
        "docs/en/user/guide.md": PAGE,
        "docs/en/user/sub/other.md": "<!-- doctest: run -->\n```python\nraise RuntimeError('boom')\n```\n",
        "docs/en/dev/ignored.md": "<!-- doctest: run -->\n```python\nx = 1\n```\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_checkout_is_its_example_files_and_its_user_guide_blocks(tmp_path):
    r = _runner()
    root = _checkout(tmp_path)
    assert r.is_checkout(root) and not r.is_checkout(root / "examples")
    progs = {p.name: p for p in r.programs(root)}
    assert list(progs) == [
        "examples/basic/breaks.py", "examples/basic/checks.py", "examples/basic/quiet.py",
        "examples/models/net/config.py", "examples/models/net/main.py", "examples/models/net/parts/layer.py",
        "docs/en/user/guide.md:15", "docs/en/user/guide.md:21", "docs/en/user/guide.md:37",
        "docs/en/user/sub/other.md:1",
    ]
    assert progs["examples/basic/checks.py"].source.startswith("import pypto_async as pypto\n")
    assert progs["examples/basic/checks.py"].folder == "examples/basic"
    assert progs["docs/en/user/guide.md:15"].source.startswith("import pypto_async.language as pl\n")
    assert progs["docs/en/user/sub/other.md:1"].folder == "docs/en/user/sub"
    main, layer, config = (progs[f"examples/models/net/{n}.py"] for n in ("main", "parts/layer", "config"))
    assert main.module == "examples.models.net.main" and not main.part_of  # the program
    assert layer.module == "examples.models.net.parts.layer"
    assert layer.part_of == config.part_of == "examples/models/net/main.py"  # parts of it, not programs
    assert not config.module  # no relative import: it runs as a file


def test_a_folder_of_example_files_keeps_working(tmp_path):
    r = _runner()
    root = _checkout(tmp_path)
    assert [p.name for p in r.programs(root / "examples" / "basic")] == ["breaks.py", "checks.py", "quiet.py"]
    assert [p.name for p in r.programs(root / "examples" / "basic" / "quiet.py")] == ["quiet.py"]


@pytest.mark.slow  # ten child processes: a second or more
def test_each_program_runs_and_says_what_it_showed(tmp_path):
    r = _runner()
    results = {res.name: res for res in r.run_all(r.programs(_checkout(tmp_path)), ROOT, timeout=120, jobs=2)}
    outcome = {name: res.outcome for name, res in results.items()}
    assert outcome == {
        "examples/basic/breaks.py": "FAIL",
        "examples/basic/checks.py": "matched",  # bare `import pypto` resolved to pypto_async as pypto
        "examples/basic/quiet.py": "ran",
        "examples/models/net/config.py": "module",
        "examples/models/net/main.py": "matched",  # ran with -m from its adapted package
        "examples/models/net/parts/layer.py": "module",
        "docs/en/user/guide.md:15": "matched",
        "docs/en/user/guide.md:21": "ran",
        "docs/en/user/guide.md:37": "ran",
        "docs/en/user/sub/other.md:1": "FAIL",
    }
    assert results["examples/basic/breaks.py"].detail == "ValueError: no such op: pl.frob"
    assert results["docs/en/user/sub/other.md:1"].detail == "RuntimeError: boom"
    assert results["examples/models/net/parts/layer.py"].part_of == "examples/models/net/main.py"
    assert r.summary(list(results.values())) == (6, 8, 3, 4)  # modules are parts of a program


def test_the_first_error_is_the_exception_that_ended_the_program():
    first_error = _runner().first_error
    stderr = textwrap.dedent("""\
        warming up
        Traceback (most recent call last):
          File "x.py", line 3, in <module>
            f()
            ^^^
        pypto_async.errors.CompileError: x.py:7: tensor subscript
        assignment is not supported
        """)
    assert first_error(stderr, "", 1) == ("pypto_async.errors.CompileError: x.py:7: tensor subscript "
                                          "assignment is not supported")
    assert first_error("", "FAIL: mismatch\n", 1) == "FAIL: mismatch"
    assert first_error("", "", 3) == "exit status 3"


def test_failures_are_grouped_by_the_missing_feature_they_name():
    blocker = _runner().blocker
    assert blocker("AttributeError: module 'pypto_async.language' has no attribute 'read'").startswith(
        "runtime scalars")
    assert blocker("AttributeError: 'JitFunction' object has no attribute 'inline'") == "`@pl.jit.inline`"
    assert blocker("ValueError: something new") == "other: ValueError: something new"


def test_the_page_round_trips_through_the_script(tmp_path):
    r = _runner()
    results = [
        r.Result("examples/a/x.py", "examples/a", "matched"),
        r.Result("examples/a/m.py", "examples/a", "module", "", "examples/a/x.py"),
        r.Result("examples/a/n.py", "examples/a", "FAIL", "ImportError: n", "examples/a/x.py"),
        r.Result("docs/en/user/p.md:3", "docs/en/user", "FAIL", "ValueError: a | b"),
    ]
    page = r.render(results, "0123abcd")
    assert r.parse(page) == (results, "0123abcd")
    assert "**1 of 2 programs run** (1 of 1 example programs (3 files), 0 of 1 doc blocks)." in page
    assert "| `examples/a` | 1 | 1 | 0 | 0 | 2 |" in page  # a failing module is not a failing program


def test_the_committed_page_and_readme_are_what_the_script_writes():
    r = _runner()
    page = (ROOT / "docs" / "pypto_examples.md").read_text()
    results, commit = r.parse(page)
    assert len(commit) == 40 and results
    assert r.render(results, commit) == page  # every row in the script's format, counts its own
    readme = (ROOT / "README.md").read_text()
    assert r.update_readme(readme, results, commit) == readme  # the README paragraph counts the same


def test_a_failing_row_names_its_first_error():
    results, _ = _runner().parse((ROOT / "docs" / "pypto_examples.md").read_text())
    assert all(res.detail for res in results if res.outcome == "FAIL")
