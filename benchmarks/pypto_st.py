"""Run PyPTO's own system tests (``tests/st``) against pypto_async, unchanged but for the import and the platform.

Given a PyPTO checkout, every ``test_*.py`` under its ``tests/st`` is a file of system tests: most
are ``PTOTestCase`` classes (tensors, a ``@pl.program``, a torch ``compute_expected``) run through
the ``test_runner`` fixture; others call ``@pl.jit`` kernels or ``ir.compile`` directly.  The tree
is copied to a scratch place with the two substitutions benchmarks/pypto_examples.py makes (the
import ``pypto`` becomes ``pypto_async``; the platforms ``"a2a3sim"``, ``"a5sim"``, ``"a2a3"``,
``"a5"`` become ``"sim"``), with the checkout's ``examples/`` beside it (some tests import them),
and PyPTO's ``harness`` package and top ``conftest.py`` replaced by this project's adapter
(benchmarks/pypto_st_adapter: the same classes, fixtures and options, written over pypto_async's
public API).  Each file then runs under pytest in a fresh interpreter (``--timeout`` seconds a
file), and each test is counted: **passed**, **failed**, **error** (its setup failed, or the file
did not import or ran past the limit) or **skipped** (a test PyPTO runs on a board only, skipped
as PyPTO skips it off-board; any other skip is listed with its reason).  A failure's first error
is read as the missing feature it names; counts per folder and per file follow.

``--markdown PAGE`` writes docs/pypto_st.md from the results; ``--commit`` names the PyPTO commit
when the checkout is not a git repository.  The tests are PyPTO's, not part of this project.

    python3 benchmarks/pypto_st.py /path/to/pypto [--jobs 2] [--timeout 600] [--only runtime/ops]
        [--markdown docs/pypto_st.md --commit HASH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pypto_examples import _commit, adapt  # noqa: E402  (the same two substitutions)

ADAPTER = Path(__file__).resolve().parent / "pypto_st_adapter"
ST = Path("tests", "st")
#: The adapter's skip reason for a test PyPTO runs on a board only (harness.core.harness.ONBOARD_ONLY).
ONBOARD_ONLY = "onboard only"
REPO = Path(__file__).resolve().parent.parent
_SIM_DEVICES = "16"
#: The device ids the tests get (``--device``): a board host's eight, so multi-rank tests are not skipped as scarce.
DEVICES = "0-7"


def test_files(root: Path, only: str = "") -> list[str]:
    """The test files of a checkout's ``tests/st`` (paths relative to it), sorted; ``only``: a folder prefix."""
    st = root / ST
    files = sorted(p.relative_to(st).as_posix() for p in st.rglob("test_*.py") if "harness" not in p.parts)
    return [f for f in files if f.startswith(only.strip("/"))] if only else files


def stage(root: Path, dest: Path) -> Path:
    """Copy the checkout's tests/st (adapted) and examples/ under ``dest``, with the adapter; return the st dir."""
    st = dest / ST
    for src_top, dst_top in ((root / ST, st), (root / "examples", dest / "examples")):
        for src in sorted(src_top.rglob("*")):
            rel = src.relative_to(src_top)
            if src.is_dir() or "__pycache__" in rel.parts:
                continue
            if src_top == root / ST and (rel.parts[0] == "harness" or rel.as_posix() == "conftest.py"):
                continue  # PyPTO's harness and top conftest: the adapter stands in for them
            out = dst_top / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            if src.suffix == ".py":
                out.write_text(adapt(src.read_text(encoding="utf-8")), encoding="utf-8")
            else:
                shutil.copyfile(src, out)
    for src in ADAPTER.rglob("*.py"):
        out = st / src.relative_to(ADAPTER)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out)
    (st / "pytest.ini").write_text("[pytest]\n")
    return st


# ---------------------------------------------------------------------------------------------
# Running one file


@dataclass
class Failure:
    """One test that did not pass: ``outcome`` failed / error / skipped, ``detail`` its first error (or reason)."""

    test: str
    outcome: str
    detail: str


@dataclass
class FileResult:
    """What one file's tests showed (``skipped`` counts onboard-only skips and other skips alike)."""

    name: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: list[Failure] = field(default_factory=list)

    @property
    def folder(self) -> str:
        return Path(self.name).parent.as_posix()

    @property
    def tests(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped


_CUT = re.compile(r"\s+Traceback \(most|\n\s*(?:assert |\+\s+where )")


def first_error(message: str, scratch: str = "", limit: int = 300) -> str:
    """A failure's first error: the exception it names, one line, without the scratch path or traceback."""
    text = _CUT.split(message, maxsplit=1)[0]
    for prefix in (scratch, str(REPO)):
        if prefix:
            text = text.replace(prefix.rstrip("/") + "/", "")
    text = re.sub(r"/tmp/pypto_st_\w+/|/tmp/pytest-of-[^/]+/pytest-\d+/", "", text)
    text = re.sub(r"^E\s+", "", text.strip())
    text = re.sub(r"^AssertionError: (?=(compile|golden|run|mismatch): )", "", text)
    text = " ".join(ln.strip() for ln in text.splitlines() if ln.strip())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def collect(name: str, entries: list[dict], scratch: str = "") -> FileResult:
    """A file's result from the adapter's JSON lines (one per test phase that did not simply pass)."""
    res = FileResult(name)
    by_test: dict[str, tuple[str, str]] = {}
    for e in entries:
        test, when, outcome, msg = e["test"], e["when"], e["outcome"], e.get("message", "")
        if when == "collect":
            by_test[test or name] = ("error", msg)
        elif outcome == "skipped":
            by_test.setdefault(test, ("skipped", msg.removeprefix("Skipped: ")))
        elif outcome == "failed" and when == "call":
            by_test[test] = ("failed", msg)
        elif outcome == "failed":  # setup or teardown
            if by_test.get(test, ("",))[0] != "failed":
                by_test[test] = ("error", msg)
        else:
            by_test.setdefault(test, ("passed", ""))
    for test, (outcome, msg) in by_test.items():
        if outcome == "passed":
            res.passed += 1
            continue
        setattr(res, {"failed": "failed", "error": "errors", "skipped": "skipped"}[outcome],
                getattr(res, {"failed": "failed", "error": "errors", "skipped": "skipped"}[outcome]) + 1)
        if outcome == "skipped" and msg.startswith(ONBOARD_ONLY):
            continue
        short = test.split("::", 1)[1] if "::" in test else "(the file)"
        res.failures.append(Failure(short, outcome, first_error(msg, scratch) or "(no message)"))
    return res


def run_file(name: str, st: Path, repo: Path, source: Path, timeout: float) -> FileResult:
    """Run one staged test file under pytest in a fresh interpreter."""
    fd, results = tempfile.mkstemp(prefix="pypto_st_", suffix=".jsonl")
    os.close(fd)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])),
               PYPTO_ST_SOURCE=str(source), PYPTO_ST_RESULTS=results, MPLBACKEND="Agg")
    env.setdefault("PYPTO_ASYNC_SIM_DEVICES", _SIM_DEVICES)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(st / "pytest.ini"),
            "--rootdir", str(st), "--device", DEVICES, name]
    tail, timed_out = "", False
    try:
        proc = subprocess.run(argv, cwd=st, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] if proc.returncode not in (0, 1, 5) else ""
    except subprocess.TimeoutExpired:
        timed_out = True
    try:
        entries = [json.loads(ln) for ln in Path(results).read_text().splitlines() if ln.strip()]
    finally:
        os.unlink(results)
    res = collect(name, entries, str(st.parent.parent))
    if timed_out:
        res.errors += 1
        res.failures.append(Failure("(the rest of the file)", "error", f"timed out after {timeout:g} s"))
    elif tail and not res.tests:
        res.errors += 1
        res.failures.append(Failure("(the file)", "error", first_error(tail[0], str(st.parent.parent))))
    return res


def run_all(root: Path, files: list[str], repo: Path, timeout: float, jobs: int = 1, report=None) -> list[FileResult]:
    """Stage the checkout and run ``files`` (``jobs`` at a time); ``report(result)`` as each finishes, in order."""
    with tempfile.TemporaryDirectory(prefix="pypto_st_") as tmp:
        st = stage(root, Path(tmp))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(run_file, f, st, repo, root / ST, timeout) for f in files]
            out = []
            for f in futures:
                out.append(f.result())
                if report:
                    report(out[-1])
    return out


# ---------------------------------------------------------------------------------------------
# What failed on what: a failure's first error, read as the missing feature it names.
# First match wins; an error no pattern knows is listed under its own text.

BLOCKERS: list[tuple[str, str]] = [
    (r"timed out after", "ran past the time limit"),
    (r"pypto_async\.language\.distributed|distributed_compiled_program|DistributedWorker|DistributedConfig",
     "distributed programs (`pypto.language.distributed`, `DistributedConfig`)"),
    (r"No module named '(pypto_async[\w.]*)'", "module `{0}`"),
    (r"cannot import name '(\w+)' from '([\w.]+)'", "`{1}.{0}`"),
    (r"has no attribute '(\w+)'", "`{0}` (a name not here)"),
]


def blocker(detail: str) -> str:
    """The missing feature a failure's first error names (or the error itself)."""
    for pattern, label in BLOCKERS:
        m = re.search(pattern, detail)
        if m:
            text = label.format(*m.groups()).replace("pypto_async", "pypto")
            return text
    return "other: " + detail


# ---------------------------------------------------------------------------------------------
# The page

_TITLE = "# PyPTO's system tests on pypto_async"
_FILE_ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| (?P<p>\d+) \| (?P<f>\d+) \| (?P<e>\d+) \| (?P<s>\d+) \|$", re.MULTILINE)
_FAIL_ROW = re.compile(r"^\| `(?P<file>[^`]+)` \| `(?P<test>(?:[^`]|``)*)` \| (?P<outcome>failed|error|skipped) \| "
                       r"(?P<detail>.*?) \|$", re.MULTILINE)


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _unesc(text: str) -> str:
    return text.replace("\\|", "|")


def folder_counts(results: list[FileResult]) -> dict[str, Counter]:
    """Per folder (first-seen order): files, tests, passed, failed, errors, skipped."""
    out: dict[str, Counter] = {}
    for r in results:
        c = out.setdefault(r.folder, Counter())
        c.update(files=1, tests=r.tests, passed=r.passed, failed=r.failed, errors=r.errors, skipped=r.skipped)
    return out


def totals(results: list[FileResult]) -> Counter:
    c = Counter()
    for v in folder_counts(results).values():
        c.update(v)
    return c


def _not_passing(results: list[FileResult]) -> list[tuple[FileResult, Failure]]:
    return [(r, f) for r in results for f in r.failures if f.outcome != "skipped"]


def render(results: list[FileResult], commit: str) -> str:
    """The docs/pypto_st.md page for ``results``, measured at PyPTO ``commit``."""
    t = totals(results)
    run = t["tests"] - t["skipped"]
    lines = [
        _TITLE,
        "",
        f"Measured against PyPTO's main branch at commit `{commit}`: every `test_*.py` under its",
        "`tests/st` (its system tests: `@pl.program` classes with a torch reference, `@pl.jit` kernels,",
        "compile checks), each file run under pytest with two substitutions only: the import (`pypto`",
        "becomes `pypto_async`) and the platform (`\"a2a3sim\"`, `\"a5sim\"`, `\"a2a3\"`, `\"a5\"` become",
        "`\"sim\"`). PyPTO's `harness` package and top `conftest.py` are replaced by this project's",
        "adapter (`benchmarks/pypto_st_adapter`: the same test-case classes, fixtures and options over",
        "pypto_async's public API; outputs are compared as PyPTO's harness does, `torch.isclose` at the",
        "case's `rtol`/`atol`, a NaN in the expected output marking a don't-care element, pure outputs",
        "poisoned before the run). The tests are PyPTO's, not part of this project. This page is",
        "generated: `python3 benchmarks/pypto_st.py PYPTO_CHECKOUT --markdown docs/pypto_st.md`.",
        "",
        "Outcomes: **passed**; **failed** (the test body raised: a compile or run failure, or a",
        "mismatch); **errors** (its setup failed, the file did not import, or it ran past the time",
        "limit); **skipped** (a test PyPTO runs on an a2a3/a5 board only, skipped as PyPTO skips it",
        "off-board; any other skip is listed below with its reason).",
        "",
        f"**{t['passed']} of {run} tests pass** ({t['failed']} failed, {t['errors']} errors; "
        f"{t['skipped']} skipped; {t['files']} files).",
        "",
        "| Folder | Files | Tests | passed | failed | errors | skipped |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for folder, c in folder_counts(results).items():
        lines.append(f"| `{folder}` | {c['files']} | {c['tests']} | {c['passed']} | {c['failed']} | {c['errors']} "
                     f"| {c['skipped']} |")
    bad = _not_passing(results)
    groups = Counter(blocker(f.detail) for _, f in bad)
    lines += ["", "## What stops the failing tests", "",
              "Each failure's first error, read as the missing feature it names (most first; the files, with",
              "their count where more than one):", ""]
    for label, n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
        per_file = Counter(r.name for r, f in bad if blocker(f.detail) == label)
        names = ", ".join(f"`{name}`" + (f" ({k})" if k > 1 else "") for name, k in per_file.items())
        lines.append(f"- {_esc(label)} ({n}): {names}")
    if not bad:
        lines.append("- none")
    lines += ["", "## Per file", "", "| File | passed | failed | errors | skipped |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{r.name}` | {r.passed} | {r.failed} | {r.errors} | {r.skipped} |" for r in results]
    lines += ["", "## Tests that did not pass", "",
              "Every failed or erroring test, and every skip that is not an onboard-only one, with its first",
              "error (or reason):", "", "| File | Test | Outcome | First error |", "| --- | --- | --- | --- |"]
    lines += [f"| `{r.name}` | `{f.test.replace('`', '``')}` | {f.outcome} | {_esc(f.detail)} |"
              for r in results for f in r.failures]
    return "\n".join(lines) + "\n"


def parse(page: str) -> tuple[list[FileResult], str]:
    """The results and commit a rendered page holds (``render(*parse(page)) == page`` for a page it made)."""
    commit = re.search(r"at commit `([0-9a-f]+)`", page)
    per_file, _, failing = page.partition("## Tests that did not pass")
    per_file = per_file.split("## Per file", 1)[-1]
    results = {m["name"]: FileResult(m["name"], int(m["p"]), int(m["f"]), int(m["e"]), int(m["s"]))
               for m in _FILE_ROW.finditer(per_file)}
    for m in _FAIL_ROW.finditer(failing):
        results[m["file"]].failures.append(Failure(m["test"].replace("``", "`"), m["outcome"], _unesc(m["detail"])))
    return list(results.values()), commit.group(1) if commit else ""


def _line(r: FileResult) -> str:
    head = f"{r.passed:>3} passed {r.failed:>3} failed {r.errors:>3} errors {r.skipped:>3} skipped  {r.name}"
    shown = [f for f in r.failures if f.outcome != "skipped"][:1]
    return head + (f"  -- {shown[0].detail[:160]}" if shown else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a PyPTO checkout (holding tests/st)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per file")
    parser.add_argument("--jobs", type=int, default=2, help="files run at once")
    parser.add_argument("--only", default="", help="run only the files under this folder of tests/st")
    parser.add_argument("--markdown", type=Path, help="write the results page here (docs/pypto_st.md)")
    parser.add_argument("--commit", help="the PyPTO commit measured (default: git rev-parse HEAD in root)")
    args = parser.parse_args(argv)
    if not (args.root / ST).is_dir():
        parser.error(f"{args.root} has no {ST}")
    repo = Path(__file__).resolve().parent.parent
    files = test_files(args.root, args.only)
    results = run_all(args.root, files, repo, args.timeout, args.jobs, report=lambda r: print(_line(r), flush=True))
    t = totals(results)
    print()
    for folder, c in folder_counts(results).items():
        print(f"{folder}: {c['passed']} passed, {c['failed']} failed, {c['errors']} errors, {c['skipped']} skipped")
    print(f"{t['passed']} of {t['tests'] - t['skipped']} tests pass ({t['skipped']} skipped)")
    if args.markdown:
        args.markdown.write_text(render(results, _commit(args.root, args.commit)))
    return 0 if t["failed"] + t["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
