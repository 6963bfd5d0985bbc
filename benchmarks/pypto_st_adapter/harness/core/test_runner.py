"""``TestRunner.run(case)``: what PyPTO's harness does with a test case, on pypto_async's public API.

1. compile ``case.get_program()`` with ``ir.compile`` for the simulator (the case's strategy, backend,
   memory planner and L0C choice passed as the options they are);
2. make every tensor from its spec, in spec order, then the scalars in theirs: the program's arguments,
   positionally, as PyPTO's runtime passes them (a UINT16/UINT32 tensor, kept in int16/int32 as PyPTO's
   harness keeps it, is passed as the unsigned view of the same bits);
3. compute the expected outputs with ``case.compute_expected`` on copies (a pure output starts as zeros,
   PyPTO's golden does the same), while the program's pure outputs (``is_output`` with no ``init_value``)
   are poisoned (NaN, or the type's largest value) so an output the program leaves unwritten shows;
4. call the compiled program (sync), then compare each output with ``torch.isclose`` at the case's
   ``config.rtol`` / ``config.atol``; a NaN in the expected output marks a don't-care element (PyPTO's rule).

It returns pypto_async's ``RunResult``; ``error`` starts with the exception a compile or run failure
raised (``Type: message``), or names the first mismatching output.
"""

from __future__ import annotations

import time
import traceback

import torch

from pypto_async import ir
from pypto_async.runtime import RunConfig, RunResult

from harness.core.harness import PTOTestCase


def _poisoned(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_floating_point:
        return torch.full_like(t, float("nan"))
    if t.dtype == torch.bool:
        return torch.ones_like(t)
    return torch.full_like(t, torch.iinfo(t.dtype).max)


def _compile_options(case: PTOTestCase) -> dict:
    options = {"strategy": case.get_strategy(), "backend_type": case.get_backend_type()}
    planner = case.get_memory_planner() or getattr(case.config, "memory_planner", None)
    if planner is not None:
        options["memory_planner"] = planner
    if case.get_enable_pypto_l0c_double_buffer() is not None:
        options["enable_pypto_l0c_double_buffer"] = case.get_enable_pypto_l0c_double_buffer()
    return options


def _mismatch(name: str, actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> str | None:
    if tuple(actual.shape) != tuple(expected.shape):
        return f"output {name!r}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    a, e = actual.cpu(), expected.cpu()
    if a.dtype != e.dtype:
        a, e = a.double(), e.double()
    care = ~torch.isnan(e) if e.dtype.is_floating_point else torch.ones_like(e, dtype=torch.bool)
    ok = torch.isclose(a, e, rtol=rtol, atol=atol) | ~care
    if bool(ok.all()):
        return None
    bad = torch.nonzero(~ok.reshape(-1)).reshape(-1)
    i = int(bad[0])
    unwritten = a.dtype.is_floating_point and bool(torch.isnan(a.reshape(-1)[bad]).all())
    what = " (left unwritten)" if unwritten else ""
    return (f"output {name!r}: {bad.numel()} of {a.numel()} elements differ beyond rtol={rtol}, atol={atol}{what}; "
            f"first at flat index {i}: actual {a.reshape(-1)[i].item()}, expected {e.reshape(-1)[i].item()}")


class TestRunner:
    """Runs PTOTestCases on the simulator (``config`` is the session's RunConfig)."""

    __test__ = False

    def __init__(self, config: RunConfig | None = None):
        self.config = config or RunConfig()

    def run(self, case: PTOTestCase) -> RunResult:
        start = time.perf_counter()
        name = case.get_name()
        stage = "compile"
        try:
            specs, scalars = case.tensor_specs, case.scalar_specs
            data = {s.name: s.create_tensor() for s in specs}
            program = case.get_program()
            if program is None:
                raise ValueError(f"Test case {name} must implement get_program()")
            if getattr(program, "__pl_program__", False) and hasattr(program, "bind"):
                program = program.bind(*data.values())  # pl.dynamic dimensions take the tensors' extents
            compiled = ir.compile(program, platform="sim", **_compile_options(case))
            stage = "golden"
            golden = {n: t.clone() for n, t in data.items()}
            params = {s.name: s.value for s in scalars}
            case.compute_expected(golden, params or None)
            stage = "run"
            args = {s.name: (_poisoned(data[s.name]) if s.is_output and s.init_value is None else data[s.name])
                    for s in specs}
            # PyPTO keeps UINT16/UINT32 data in int16/int32 torch tensors (the same bits): the program gets
            # the unsigned view of that storage, the comparison reads the signed one, as the reference does.
            unsigned = {"uint16": torch.uint16, "uint32": torch.uint32}
            call = [args[s.name].view(unsigned[s.dtype.value]) if s.dtype.value in unsigned else args[s.name]
                    for s in specs]
            compiled(*call, *(s.value for s in scalars), config=RunConfig(platform="sim"))
        except Exception as exc:  # noqa: BLE001 - a failure is reported, as PyPTO's runner does
            first = f"{type(exc).__module__}.{type(exc).__name__}".replace("builtins.", "")
            return RunResult(passed=False, test_name=name, execution_time=time.perf_counter() - start,
                             error=f"{stage}: {first}: {exc}\n{traceback.format_exc()}")
        for s in specs:
            if s.is_output:
                err = _mismatch(s.name, args[s.name], golden[s.name], case.config.rtol, case.config.atol)
                if err:
                    return RunResult(passed=False, test_name=name, error=f"mismatch: {err}",
                                     execution_time=time.perf_counter() - start)
        return RunResult(passed=True, test_name=name, execution_time=time.perf_counter() - start)


class TestSuite:
    """Test cases run together by one runner."""

    __test__ = False

    def __init__(self, name: str, config: RunConfig | None = None):
        self.name, self.config, self._cases = name, config or RunConfig(), []

    def add_test(self, case: PTOTestCase) -> "TestSuite":
        self._cases.append(case)
        return self

    def run_all(self, runner: TestRunner | None = None) -> dict[str, RunResult]:
        runner = runner or TestRunner(self.config)
        return {c.get_name(): runner.run(c) for c in self._cases}


_last_device: dict = {"value": None}  # PyPTO's conftest reads it; the simulator's one device is not reported
