"""docs/pypto_compat.md stays true: every row is checked against the package.

A row marked same, extended or differs names something that must exist here; a row marked
missing names something that must not. So the page goes stale in neither direction: adding a
PyPTO name to the package fails the test until its row says so, and removing one fails it too.
"""

import importlib
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError
from pypto_async.runtime import ChipWorker, RunConfig, benchmark

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "pypto_compat.md"
README = ROOT / "README.md"

PREFIXES = {"pypto": "pypto_async", "pl": "pypto_async.language", "ir": "pypto_async.ir", "runtime": "pypto_async.runtime",
            "backend": "pypto_async.backend", "debug": "pypto_async.debug"}
STATUSES = {"same", "extended", "differs", "missing"}
# `pl.load(target_memory=)`: a dotted name, optionally a keyword the callable must take.
NAME = re.compile(r"^(?P<path>[A-Za-z_][\w.]*)(?:\((?P<kw>\w+)=\))?$")
ROW = re.compile(r"^\|\s*`(?P<name>[^`]+)`\s*\|\s*(?P<status>[^|]*?)\s*\|")

MISSING = object()


def doc_rows():
    """(name, status, line number) of every table row of the page that names something."""
    rows = []
    for number, line in enumerate(DOC.read_text().splitlines(), 1):
        match = ROW.match(line)
        if match:
            rows.append((match["name"], match["status"], number))
    return rows


ROWS = doc_rows()


@pl.jit
def _add(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [16, 16])
        tb = pl.load(b, [0, 0], [16, 16])
        pl.store(pl.add(ta, tb), [0, 0], out)
    return out


@pytest.fixture(scope="module")
def samples():
    """One live object per class whose members the page lists, for attributes set per instance."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 16)).astype(np.float32)
    program = _add.lower(a, b, np.zeros_like(a))
    compiled = ir.compile(program, platform="sim")
    # Callables that take their options as **kwargs and refuse unknown ones: a keyword row is
    # checked by calling them with it.
    probes = {
        "ir.compile": lambda **option: ir.compile(program, platform="sim", **option),
        "pl.JitFunction.compile": lambda **option: _add.compile(a, b, np.zeros_like(a), **option),
    }
    with ChipWorker(config=RunConfig(platform="sim")) as worker:
        tensor = worker.alloc_tensor((16, 16), np.float32, init=b)
        handle = worker.register(compiled)
        result = benchmark(compiled, (a, b, np.zeros_like(a)), rounds=2, warmup=1)
        yield {
            "ir.Program": program,
            "ir.CompiledProgram": compiled,
            "runtime.ChipWorker": worker,
            "runtime.DeviceTensor": tensor,
            "runtime.KernelHandle": handle,
            "runtime.RegistrationHandle": handle,
            "runtime.BenchmarkResult": result,
            "runtime.BenchmarkStats": result,
            "probes": probes,
        }
        worker.free_tensor(tensor)


def resolve(path, samples):
    """The object `path` names here, or MISSING.

    A member absent from its class is looked up on that class's sample instance, so
    attributes set in ``__init__`` count as present.
    """
    prefix, _, rest = path.partition(".")
    obj = importlib.import_module(PREFIXES[prefix])
    walked = prefix
    for part in rest.split("."):
        found = getattr(obj, part, MISSING)
        if found is MISSING and walked in samples:
            found = getattr(samples[walked], part, MISSING)
        if found is MISSING:
            return MISSING
        obj, walked = found, f"{walked}.{part}"
    return obj


def takes_keyword(obj, keyword, probe=None):
    """Whether `obj` takes `keyword` by name.

    A bare ``**kwargs`` does not count, unless `probe` calls `obj` with the keyword and it is
    not refused as unknown.
    """
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False
    param = params.get(keyword)
    if param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
        return True
    if probe is None or not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return False
    try:
        probe(**{keyword: None})
    except PtoArgumentError as exc:
        return "unknown option" not in str(exc)
    except TypeError as exc:
        return "unexpected keyword" not in str(exc)
    return True


def exists(name, samples):
    match = NAME.match(name)
    obj = resolve(match["path"], samples)
    if obj is MISSING:
        return False
    if match["kw"] is None:
        return True
    return takes_keyword(obj, match["kw"], samples["probes"].get(match["path"]))


def test_every_row_is_well_formed():
    assert len(ROWS) > 100, "the tables were not found"
    names = [name for name, _, _ in ROWS]
    assert len(names) == len(set(names)), "a name is listed twice"
    for name, status, number in ROWS:
        assert status in STATUSES, f"docs/pypto_compat.md:{number}: unknown status {status!r}"
        match = NAME.match(name)
        assert match, f"docs/pypto_compat.md:{number}: cannot read the name {name!r}"
        assert match["path"].partition(".")[0] in PREFIXES, f"docs/pypto_compat.md:{number}: {name!r}"


@pytest.mark.parametrize(("name", "status", "number"), ROWS, ids=[row[0] for row in ROWS])
def test_row_matches_the_package(name, status, number, samples):
    here = exists(name, samples)
    if status == "missing":
        assert not here, f"docs/pypto_compat.md:{number}: {name} exists here; the row says missing"
    else:
        assert here, f"docs/pypto_compat.md:{number}: {name} does not exist here; the row says {status}"


def test_missing_is_detected(samples):
    # The checker itself can fail: a name, member or keyword that is not here reads as absent.
    assert not exists("runtime.ChipWorker.no_such_member", samples)
    assert not exists("pl.load(no_such_keyword=)", samples)
    assert not exists("ir.CompiledProgram.no_such_field", samples)
    assert exists("ir.CompiledProgram.output_dir", samples)  # set per instance, found on the sample
    assert exists("pl.load(target_memory=)", samples)
    assert not exists("ir.compile(no_such_option=)", samples)  # **kwargs, refused when called
    assert exists("ir.compile(validate_ir=)", samples)


def test_readme_runtime_names_are_listed_as_present():
    # The README names PyPTO's runtime-page names that work here; each must have a present row.
    text = README.read_text()
    start = text.index("Every name of PyPTO's runtime page")
    sentence = text[start:text.index(";", start)]
    assert "docs/pypto_compat.md" in text[start:start + 1200], "the README no longer points at the page"
    claimed = re.findall(r"`@?([\w.]+)`", sentence)
    assert len(claimed) >= 10
    present = {name.rsplit(".", 1)[-1] for name, status, _ in ROWS if status != "missing"}
    present |= {name.split("(")[0].rsplit(".", 1)[-1] for name, status, _ in ROWS if status != "missing"}
    for name in claimed:
        assert name.rsplit(".", 1)[-1] in present, f"README claims {name}; docs/pypto_compat.md has no present row"


def _used_by_a_test(name: str, text: str) -> bool:
    """Whether the test sources ``text`` use the row's name as a PyPTO program spells it."""
    match = NAME.match(name)
    path, kw = match["path"], match["kw"]
    parts = path.split(".")
    if parts[0] == "pl" and not (len(parts) > 2 and parts[1][:1].isupper()):  # pl.X (pl.tile.X, pl.tensor.X)
        spelled = "|".join(rf"{re.escape(p)}\b" for p in (path, f"pl.tile.{parts[-1]}", f"pl.tensor.{parts[-1]}"))
        if kw is None:
            return re.search(spelled, text) is not None
        return re.search(rf"(?:{spelled})\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\b{kw}=", text) is not None
    last = parts[-1]  # a member: its name; a call's keyword anywhere
    if last == "__call__":
        return kw is not None and re.search(rf"\b{kw}=", text) is not None
    return re.search(rf"\b{re.escape(last)}\b", text) is not None and (
        kw is None or re.search(rf"\b{kw}=", text) is not None)


@pytest.mark.slow
def test_every_same_row_is_used_by_a_test():
    # A row marked same is a claim about PyPTO's documented usage: some test other than this
    # file must run that usage (the behaviour is asserted there, against torch or numpy).
    text = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py") if p.name != "test_compat.py")
    unused = [f"docs/pypto_compat.md:{number}: {name}" for name, status, number in ROWS
              if status == "same" and not _used_by_a_test(name, text)]
    assert not unused, "rows marked same that no test uses:\n" + "\n".join(unused)


def test_the_usage_check_can_fail():
    assert not _used_by_a_test("pl.no_such_op", "pl.add(x, y)")
    assert not _used_by_a_test("pl.recip(high_precision=)", "pl.recip(x)\nf(high_precision=True)")
    assert _used_by_a_test("pl.recip(high_precision=)", "pl.recip(pl.load(x, [0, 0]), high_precision=True)")
    assert _used_by_a_test("pl.get_block_idx", "i = pl.tile.get_block_idx()")
