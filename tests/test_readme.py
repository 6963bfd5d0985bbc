"""The README and docs/ are true: their code runs, their links resolve, CI runs the README's command."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, ROOT / "native" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def test_the_readme_starts_with_the_two_set_up_commands():
    first = _blocks(README.read_text(), "bash")[0].strip().splitlines()
    assert first == ["python3 -m pip install '.[demo]' && pypto-async demo",
                     "python3 -m pip install -e '.[test]' && python3 -m pytest"]


def test_ci_runs_the_readmes_test_command_then_the_slow_tier():
    command = _blocks(README.read_text(), "bash")[0].strip().splitlines()[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert command in ci
    assert ci.index(command) < ci.index("python3 -m pytest -m slow")


def _ci_with_a_stand_in_python(tmp_path, failing: str | None) -> tuple[int, list[str]]:
    """Run a copy of .ci/run whose ``python3`` records its arguments and fails on ``failing``."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fail = f'[ "$*" = "{failing}" ] && exit 1\n' if failing else ""
    fake.write_text(f'#!/bin/sh\necho "$*" >> "{tmp_path}/calls"\n{fail}exit 0\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env=env, capture_output=True, text=True)
    return proc.returncode, (tmp_path / "calls").read_text().splitlines()


STEPS = ["-m pip install -e .[test]", "-m pytest", "-m ruff check .", "-m pytest -m slow"]


@pytest.mark.parametrize("failing", STEPS)
def test_ci_fails_when_any_step_fails(tmp_path, failing):
    rc, calls = _ci_with_a_stand_in_python(tmp_path, failing)
    assert rc != 0
    assert calls[-1] == "-m pytest -m slow"  # the later steps still ran


def test_ci_passes_when_every_step_passes(tmp_path):
    rc, calls = _ci_with_a_stand_in_python(tmp_path, None)
    assert rc == 0 and calls == STEPS


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"


HISTORY = ["before the re-cut", "earlier runs", "later runs", "missed", "before and after the runtime", "before the driver",
           "as in the seed", "the seed's"]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_history_prose_where_a_user_reads(page):
    text = page.read_text().lower()
    for phrase in HISTORY:
        assert phrase not in text, f"{page.relative_to(ROOT)}: {phrase!r}"


def test_the_benchmark_page_is_generated_from_its_results(tmp_path):
    from pypto_async._cli import main

    out = tmp_path / "benchmarks.md"
    assert main(["bench", "--render", str(ROOT / "docs" / "bench_results.json"), "--markdown", str(out)]) == 0
    assert out.read_text() == (ROOT / "docs" / "benchmarks.md").read_text(), \
        "docs/benchmarks.md differs from its bench_results.json: regenerate it, never edit it"
    assert "load average" in out.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(_blocks(README.read_text(), "python"))))
def test_each_readme_python_block_runs(index, tmp_path):
    code = _blocks(README.read_text(), "python")[index]
    script = tmp_path / "block.py"
    script.write_text(code)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYPTO_ASYNC_CACHE_DIR", str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr


def test_the_readme_examples_need_only_the_first_set_up_command():
    # The README's examples import torch; the first command installs the demo extra, which must carry it.
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    code = "\n".join(_blocks(README.read_text(), "python"))
    if "import torch" in code:
        assert "torch==2.13.0" in extras["demo"]
    for name in re.findall(r"\[`examples/(\w+\.py)`\]", README.read_text()):
        assert (ROOT / "examples" / name).is_file(), name


def test_the_plugin_page_shows_the_user_example_that_test_plugin_runs():
    shown = _blocks((ROOT / "docs" / "testing.md").read_text(), "python")[0]
    source = (ROOT / "tests" / "plugin_user_example.py").read_text()
    body = source[source.index('"""', 3) + 3:].lstrip("\n")
    assert body.startswith(shown), "docs/testing.md no longer shows tests/plugin_user_example.py as it is"
