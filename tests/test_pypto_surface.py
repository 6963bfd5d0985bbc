"""PyPTO's runtime surface, as a PyPTO program uses it (runtime/_call.py, _kernel.py, _worker.py).

Written the way PyPTO's own runtime tests are: torch tensors in, torch references out, the
program compiled once with ``ir.compile`` or ``kernel.compile`` and dispatched through
``compiled(...)``, ``w.run(...)`` or a registration handle.  Outputs are poisoned (NaN) before
every launch, so a launch that does not write them cannot pass.
"""

from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import (
    PtoArgumentError,
    PtoClosedError,
    PtoInvalidStateError,
    PtoNotSupported,
    PtoPlatformMismatch,
)
from pypto_async.runtime import ChipWorker, KernelHandle, Launch, RegistrationHandle, RunConfig
from helpers.tiers import tiered

torch = pytest.importorskip("torch")

R, C = 16, 32
SMALL = {"cores": 2, "copy_engines": 2, "device_memory": 64 << 20}


@pl.jit
def add_kernel(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        pl.store(pl.add(ta, tb), [0, 0], out)
    return out


@pl.jit
def sum_diff(a: pl.Tensor, b: pl.Tensor, s: pl.Out[pl.Tensor], d: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        pl.store(pl.add(ta, tb), [0, 0], s)
        pl.store(pl.sub(ta, tb), [0, 0], d)
    return s, d


@pl.jit
def scale_into(x: pl.Tensor, y: pl.InOut[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        tx = pl.load(x, [0, 0], [R, C])
        ty = pl.load(y, [0, 0], [R, C])
        pl.store(pl.add(ty, pl.mul(tx, tx)), [0, 0], y)


def poison():
    return torch.full((R, C), float("nan"))


@pytest.fixture
def ab():
    torch.manual_seed(0)
    return torch.randn(R, C), torch.randn(R, C)


@pytest.fixture(scope="module")
def add_compiled():
    z = torch.zeros(R, C)
    return ir.compile(add_kernel.lower(z, z, z), platform="a2a3sim")


@pytest.fixture(scope="module")
def pair_compiled():
    z = torch.zeros(R, C)
    return sum_diff.compile(z, z, z, z)


# -- what a call returns ----------------------------------------------------------------------------


def test_sync_calls_return_the_outputs_in_place(add_compiled, ab):
    a, b = ab
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        h = w.register(add_compiled)
        for call in (lambda out: h(a, b, out), lambda out: w.run(add_compiled, a, b, out),
                     lambda out: add_compiled(a, b, out)):
            out = poison()
            got = call(out)
            assert got is out and not isinstance(got, Launch)
            torch.testing.assert_close(out, a + b, rtol=0, atol=0)


def test_return_style_allocates_and_returns_the_outputs(add_compiled, pair_compiled, ab):
    # PyPTO's return style: pass the inputs only; the Out tensors are allocated and returned.
    a, b = ab
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        c = w.run(add_compiled, a, b)
        assert isinstance(c, torch.Tensor) and c.shape == (R, C) and c.dtype == torch.float32
        torch.testing.assert_close(c, a + b, rtol=0, atol=0)
        s, d = w.register(pair_compiled)(a, b)
        torch.testing.assert_close(s, a + b, rtol=0, atol=0)
        torch.testing.assert_close(d, a - b, rtol=0, atol=0)
        c2 = add_compiled(a, b)  # compiled(...) on the worker opened around it
        assert c2 is not c
        torch.testing.assert_close(c2, a + b, rtol=0, atol=0)
        n = add_compiled(a.numpy(), b.numpy())  # numpy in, numpy out
        assert isinstance(n, np.ndarray)
        np.testing.assert_array_equal(n, (a + b).numpy())


def test_a_program_that_returns_nothing_returns_none(ab):
    a, _ = ab
    y = torch.randn(R, C)
    expected = y + a * a
    compiled = scale_into.compile(a, y)
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        assert w.run(compiled, a, y) is None
    torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)


def test_wrong_argument_counts_name_both_forms(add_compiled, ab):
    a, b = ab
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        before = w.stats().commands_submitted
        with pytest.raises(PtoArgumentError, match=r"takes 3 \(in place\) or 2 \(return style\)"):
            w.run(add_compiled, a)
        with pytest.raises(PtoArgumentError, match=r"takes 3 "):
            w.run(add_compiled, a, b, poison(), poison())
        assert w.stats().commands_submitted == before
        torch.testing.assert_close(w.run(add_compiled, a, b), a + b)  # the worker keeps working


@pytest.mark.anyio
async def test_async_mode_returns_a_launch_that_awaits_to_the_same_value(add_compiled, ab, anyio_backend):
    a, b = ab
    async with ChipWorker(config=RunConfig(**SMALL)) as w:
        out = poison()
        launch = w.run(add_compiled, a, b, out)
        assert isinstance(launch, Launch)
        assert await launch is out
        launch = w.register(add_compiled)(a, b)  # return style
        assert isinstance(launch, Launch)
        c = await launch
        torch.testing.assert_close(c, a + b, rtol=0, atol=0)
        torch.testing.assert_close(out, a + b, rtol=0, atol=0)


# -- RegistrationHandle -----------------------------------------------------------------------------


def test_registration_handle_cid_unregister_and_with(add_compiled, ab):
    a, b = ab
    assert RegistrationHandle is KernelHandle
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        h = w.register(add_compiled)
        assert isinstance(h, RegistrationHandle) and isinstance(h.cid, int) and h.cid > 0
        assert not h.closed
        assert w.register(add_compiled) is h and (w.aicpu_dlopen_count, w.host_dlopen_count) == (1, 0)
        torch.testing.assert_close(h(a, b), a + b)
        h.unregister()
        h.unregister()  # idempotent
        assert h.closed
        before = w.stats().commands_submitted
        with pytest.raises(PtoClosedError, match="unregistered"):
            h(a, b, poison())
        assert w.stats().commands_submitted == before
        with w.register(add_compiled) as h2:  # a fresh, open handle of the same loaded kernel
            assert h2 is not h and h2.cid == h.cid and not h2.closed
            assert w.aicpu_dlopen_count == 2  # prepared again after unregister(), as PyPTO counts it
            torch.testing.assert_close(h2(a, b), a + b)
        assert h2.closed
        h3 = w.register(add_compiled)
    assert h3.closed  # the worker closed


# -- ChipWorker: PyPTO's constructor, init, raw memory, binding, current() ---------------------------


def test_auto_init_false_defers_the_device_until_init(add_compiled, ab):
    a, b = ab
    w = ChipWorker(RunConfig(**SMALL), level=2, runtime="tensormap_and_ringbuffer", enable_sdma=False,
                   auto_init=False)
    assert not w.initialized
    with pytest.raises(PtoClosedError, match="not initialized"):
        w.register(add_compiled)
    w.init()
    w.init()  # idempotent
    assert w.initialized and (w.level, w.runtime, w.device_id) == (2, "tensormap_and_ringbuffer", 0)
    torch.testing.assert_close(w.run(add_compiled, a, b), a + b)
    w.close()
    assert not w.initialized
    with pytest.raises(PtoClosedError):
        w.init()
    lazy = ChipWorker(RunConfig(**SMALL), auto_init=False)
    with lazy as w2:  # `with` initializes, as in PyPTO
        assert w2.initialized
        torch.testing.assert_close(w2.run(add_compiled, a, b), a + b)


@pytest.mark.parametrize(("kwargs", "exc", "pattern"), [
    ({"level": 3}, PtoNotSupported, "level=3"),
    ({"level": "2"}, PtoArgumentError, "level must be an int"),
    ({"runtime": "host_build_graph"}, PtoNotSupported, "host_build_graph"),
    ({"enable_sdma": 1}, PtoArgumentError, "enable_sdma must be a bool"),
    ({"auto_init": "yes"}, PtoArgumentError, "auto_init must be a bool"),
])
def test_bad_worker_keywords_are_refused(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        ChipWorker(RunConfig(**SMALL), **kwargs)


def test_malloc_copy_to_copy_from_free_by_pointer():
    # PyPTO's raw path: malloc, copy_to from a host pointer, copy_from into another, free.
    torch.manual_seed(1)
    src = torch.randn(R, C)
    dst = torch.full((R, C), float("nan"))
    nbytes = src.numel() * src.element_size()
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        ptr = w.malloc(nbytes)
        assert isinstance(ptr, int) and ptr > 0
        w.copy_to(ptr, src.data_ptr(), nbytes)
        w.copy_from(dst.data_ptr(), ptr, nbytes, worker_id=0)
        torch.testing.assert_close(dst, src, rtol=0, atol=0)
        with pytest.raises(PtoArgumentError, match="not an address"):
            w.free(ptr + 64)  # an interior pointer
        with pytest.raises(PtoArgumentError, match="worker_id"):
            w.malloc(64, worker_id=1)
        for bad in (0, -5, 2.5, True):
            with pytest.raises(PtoArgumentError, match="nbytes"):
                w.malloc(bad)
        w.free(ptr)
        with pytest.raises(PtoArgumentError, match="freed already"):
            w.free(ptr)
        w.sync()
        assert w.stats().memory_in_use == 0


@pytest.mark.slow
def test_malloc_left_allocated_is_freed_at_close_with_a_warning():
    with pytest.warns(ResourceWarning):
        with ChipWorker(config=RunConfig(**SMALL)) as w:
            w.malloc(4096)
    gc.collect()


def test_current_finds_the_open_worker_of_a_binding():
    assert ChipWorker.current(platform="sim", device_id=0) is None
    with ChipWorker(config=RunConfig(platform="a2a3sim", **SMALL)) as w:
        assert ChipWorker.current(level=2, platform="a5sim", device_id=0, runtime="tensormap_and_ringbuffer") is w
        assert ChipWorker.current(platform="sim", device_id=1) is None
        assert ChipWorker.current(level=3, platform="sim") is None
        with pytest.raises(PtoInvalidStateError, match="enable_sdma"):
            ChipWorker.current(platform="sim", require_sdma=True)
        with ChipWorker(config=RunConfig(**SMALL), enable_sdma=True) as inner:
            assert ChipWorker.current(platform="sim") is inner
            assert ChipWorker.current(platform="sim", require_sdma=True) is inner
        assert ChipWorker.current(platform="sim") is w
    assert ChipWorker.current(platform="sim") is None


# -- per-call config= ---------------------------------------------------------------------------------


def test_compiled_with_config_reuses_the_open_worker_of_its_binding(add_compiled, ab):
    a, b = ab
    cfg = RunConfig(platform="a2a3sim", **SMALL)
    with ChipWorker(config=cfg) as w:
        before = w.stats().launches
        out = poison()
        assert add_compiled(a, b, out, config=cfg) is out
        assert w.stats().launches == before + 1  # it ran here, not on a worker of its own
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)
    out = poison()
    add_compiled(a, b, out, config=cfg)  # no worker open: one for the call
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)


@pytest.mark.slow
def test_kernel_with_config_runs_and_compiles_with_its_compile_side(ab, tmp_path):
    a, b = ab
    cfg = RunConfig(platform="a5sim", dump_passes=True, save_kernels_dir=str(tmp_path / "k"), **SMALL)
    out = poison()
    assert add_kernel(a, b, out, config=cfg) is out
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)
    assert sorted(p.name for p in (tmp_path / "k" / "passes_dump").iterdir())[0] == "00_input.txt"
    plain = add_kernel.compile(a, b, out)
    dumped = add_kernel.compile(a, b, out, config=RunConfig(dump_passes=True))
    assert add_kernel.compile(a, b, out, config=RunConfig(dump_passes=True)) is dumped  # cached
    assert dumped is not plain  # compile-side fields key the cache
    assert dumped.platform == "sim" and add_kernel.compile(a, b, out, config=RunConfig(platform="a5sim")).platform == "a5sim"


def test_a_per_call_config_that_resizes_the_device_is_refused(add_compiled, ab):
    a, b = ab
    with ChipWorker(config=RunConfig(ring_task_window=16, **SMALL)) as w:
        h = w.register(add_compiled)
        before = w.stats().commands_submitted
        with pytest.raises(PtoArgumentError, match="ring_task_window"):
            h(a, b, poison(), config=RunConfig(ring_task_window=32))
        with pytest.raises(PtoArgumentError, match="device_id"):
            h(a, b, poison(), config=RunConfig(device_id=1))
        assert w.stats().commands_submitted == before
        # The same sizes, PyPTO's per-level form with the same largest ring, or none: accepted.
        for cfg in (RunConfig(ring_task_window=16), RunConfig(ring_task_window=[16, 0, 4, 0]), RunConfig()):
            out = poison()
            assert h(a, b, out, config=cfg) is out
            torch.testing.assert_close(out, a + b, rtol=0, atol=0)


def test_a_per_call_config_of_another_platform_is_refused(add_compiled, ab, monkeypatch):
    from pypto_async import _signature
    from pypto_async.runtime._call import check_call_config

    monkeypatch.setitem(_signature.PLATFORMS, "b9", "b9")
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        with pytest.raises(PtoPlatformMismatch):
            check_call_config(w, RunConfig(platform="b9"))


# -- CompiledProgram's runtime-side members -------------------------------------------------------------


def test_compiled_program_call_shape_members(add_compiled, pair_compiled, ab):
    a, b = ab
    assert add_compiled.param_names == ["a", "b", "out"] and add_compiled.output_indices == [2]
    assert pair_compiled.output_indices == [2, 3] and add_compiled.orchestration_names == []
    assert add_compiled.runtime_name == "tensormap_and_ringbuffer"
    orch_args, coerced, return_style = add_compiled.build_orch_args(a, b)
    assert return_style is True and len(coerced) == 3 and coerced[0] is a and coerced[1] is b
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        w.run(add_compiled, *orch_args)
    torch.testing.assert_close(coerced[2], a + b, rtol=0, atol=0)  # read the outputs after dispatch
    out = poison()
    _, coerced, return_style = add_compiled.build_orch_args(a, b, out)
    assert return_style is False and coerced[2] is out
    with pytest.raises(PtoArgumentError, match="takes 3"):
        add_compiled.build_orch_args(a)


def test_build_call_config_precedence(add_compiled, tmp_path):
    cfg = RunConfig(aicpu_thread_num=3, enable_chip_swimlane=True, ring_heap=[0, 4096, 0, 1024])
    cc = add_compiled.build_call_config(cfg, dfx_dir=tmp_path)
    assert (cc.aicpu_thread_num, cc.enable_chip_swimlane, cc.ring_heap, cc.output_prefix) == (3, 4, 4096, str(tmp_path))
    assert add_compiled.build_call_config(cfg, aicpu_thread_num=5).aicpu_thread_num == 5
    assert add_compiled.build_call_config().aicpu_thread_num is None and add_compiled.build_call_config().output_prefix is None


def test_compiled_program_stands_for_its_directory_as_pypto_s(add_compiled, tmp_path):
    import os

    from pypto_async.ir import CompiledProgram

    again = CompiledProgram.from_dir(add_compiled.output_dir)
    assert str(add_compiled) == os.fspath(add_compiled) == str(add_compiled.output_dir)
    assert os.path.join(add_compiled, "kernel.c") == str(add_compiled.output_dir / "kernel.c")
    assert again == add_compiled and hash(again) == hash(add_compiled) and len({again, add_compiled}) == 1
    assert add_compiled == str(add_compiled.output_dir) and add_compiled == add_compiled.output_dir
    z = torch.zeros(R, C)
    other = ir.compile(add_kernel.lower(z, z, z), platform="sim", output_dir=tmp_path)
    assert other != add_compiled and other == tmp_path and add_compiled != 3
    assert CompiledProgram.__test__ is False  # a test module importing it is not collecting a test class
    assert add_compiled.orchestration_names == []
    with pytest.raises(KeyError, match="has no orchestration 'main'"):
        add_compiled["main"]


def test_load_checks_the_library_on_a_handle_and_rebuilds_one_on_the_class(add_compiled, ab, tmp_path):
    import shutil

    from pypto_async.errors import PtoLoadError
    from pypto_async.ir import CompiledProgram

    a, b = ab
    assert add_compiled.load() is None  # PyPTO's eager load: the library loads and has its entry
    rebuilt = CompiledProgram.load(add_compiled.output_dir)  # on the class: from_dir
    assert rebuilt.program is None and rebuilt.param_names == add_compiled.param_names
    out = poison()
    rebuilt(a, b, out)
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)
    broken = tmp_path / "broken"
    shutil.copytree(add_compiled.output_dir, broken)
    (broken / "kernel.so").write_bytes(b"not a shared object")
    with pytest.raises(PtoLoadError, match="cannot load"):
        CompiledProgram.from_dir(broken).load()


def test_build_orch_args_takes_the_dispatching_worker(add_compiled, ab):
    a, b = ab
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        orch_args, coerced, return_style = add_compiled.build_orch_args(a, b, worker=w)  # PyPTO's form
        w.run(add_compiled, *orch_args)
    assert return_style is True
    torch.testing.assert_close(coerced[2], a + b, rtol=0, atol=0)


# -- CompiledProgram.validate_ir: each pass's program run as torch ---------------------------------------


@pl.jit
def _fma_exp(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        pl.store(pl.exp(pl.add(pl.mul(ta, tb), tb)), [0, 0], out)
    return out


@pl.jit
def _fma_wrong(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        pl.store(pl.exp(pl.add(pl.mul(ta, tb), ta)), [0, 0], out)  # + a, not + b
    return out


def test_validate_ir_runs_every_stage_the_dump_names(ab, tmp_path, capsys):
    a, b = ab
    z = torch.zeros(R, C)
    compiled = ir.compile(_fma_exp.trace(z, z, z), platform="sim", output_dir=tmp_path, dump_passes=True)
    golden = torch.exp(a * b + b)
    out = poison()
    compiled.validate_ir({"a": a, "b": b, "out": out}, {"out": golden}, rtol=1e-5, atol=1e-6)
    assert torch.isnan(out).all()  # each stage ran on a copy
    lines = capsys.readouterr().out.splitlines()
    stages = [line.strip("= ") for line in lines if line.startswith("=")]
    assert stages == sorted(p.stem for p in (tmp_path / "passes_dump").iterdir())  # 00_input, then each pass
    assert len(stages) >= 3 and lines.count("validate tensor: 'out', max_abs_diff: 0.000000e+00, pass: True") \
        == len(stages)
    compiled(a, b, out)  # what the stages computed is what the kernel computes
    torch.testing.assert_close(out, golden, rtol=1e-5, atol=1e-6)


def test_validate_ir_names_the_pass_that_changed_the_result(ab, monkeypatch, capsys):
    from pypto_async.ir import _compile, _passes

    a, b = ab
    z = torch.zeros(R, C)
    compiled = ir.compile(_fma_exp.trace(z, z, z), platform="sim")
    wrong = _fma_wrong.trace(z, z, z)

    def break_it(program):  # a pass that returns another computation
        return dataclasses.replace(wrong, name=program.name)

    monkeypatch.setattr(_compile, "PIPELINE", [_passes.infer_and_check, break_it, _passes.infer_and_check])
    with pytest.raises(AssertionError, match="after 02_break_it, tensor 'out' differs from expected"):
        compiled.validate_ir({"a": a, "b": b, "out": poison()}, {"out": torch.exp(a * b + b)})
    out = capsys.readouterr().out
    assert "01_infer_and_check" in out and "pass: False" in out and "03_" not in out


def test_validate_ir_refuses_bad_arguments_before_any_stage_runs(ab, capsys):
    from pypto_async.errors import PtoInvalidStateError
    from pypto_async.ir import CompiledProgram

    a, b = ab
    z = torch.zeros(R, C)
    compiled = ir.compile(_fma_exp.trace(z, z, z), platform="sim")
    full = {"a": a, "b": b, "out": poison()}
    golden = {"out": torch.exp(a * b + b)}
    cases = [
        (({"a": a, "b": b}, golden), {}, r"lacks parameter\(s\) out"),
        (({**full, "c": a}, golden), {}, "names no parameter of _fma_exp: c"),
        ((full, {"x": a}), {}, "expected names 'x'"),
        ((full, {"out": torch.zeros(2, 2)}), {}, r"has shape \[2, 2\]"),
        (({**full, "a": a.double()}, golden), {}, r"tensors\['a'\] is \[16, 32\] torch.float64"),
        (({**full, "a": a[:8]}, golden), {}, r"tensors\['a'\] is \[8, 32\]"),
        (({**full, "a": [1.0]}, golden), {}, "must be a torch tensor or a numpy array"),
        (([a, b], golden), {}, "must be a dict"),
        ((full, golden), {"rtol": -1.0}, "rtol must be a finite number >= 0"),
        ((full, golden), {"atol": True}, "atol must be a finite number >= 0"),
    ]
    for args, kwargs, pattern in cases:
        with pytest.raises(PtoArgumentError, match=pattern):
            compiled.validate_ir(*args, **kwargs)
    assert capsys.readouterr().out == ""  # refused before a stage ran
    numpy_in = {k: v.numpy() for k, v in full.items()}  # numpy arrays are taken too
    compiled.validate_ir(numpy_in, {"out": golden["out"].numpy()}, rtol=1e-5, atol=1e-6)
    with pytest.raises(PtoInvalidStateError, match="has no program"):
        CompiledProgram.from_dir(compiled.output_dir).validate_ir(full, golden)
    with pytest.raises(PtoArgumentError, match="validate_ir must be a bool"):
        ir.compile(_fma_exp.trace(z, z, z), platform="sim", validate_ir="yes")
    assert ir.compile(_fma_exp.trace(z, z, z), platform="sim", validate_ir=True) == compiled  # accepted, no effect


# -- RunConfig: PyPTO's levels, rings and compile side ---------------------------------------------------


def test_run_config_levels_rings_and_compile_side(tmp_path):
    cfg = RunConfig(enable_chip_swimlane=True, enable_dump_args=True, enable_pmu=2)
    assert (cfg.enable_chip_swimlane, cfg.enable_dump_args, cfg.enable_pmu) == (4, 1, 2)
    assert cfg.save_kernels is True and cfg.any_dfx_enabled()  # DFX keeps its outputs, as PyPTO
    assert not RunConfig().any_dfx_enabled() and RunConfig().save_kernels is False
    assert RunConfig(enable_chip_swimlane=False).enable_chip_swimlane == 0
    assert RunConfig(ring_heap=[1024, 0, 0, 8192]).ring_heap == (1024, 0, 0, 8192)
    assert RunConfig(ring_heap=[1024, 0, 0, 8192])._device_fields()["ring_heap"] == 8192
    assert "ring_heap" not in RunConfig(ring_heap=None)._device_fields()
    full = RunConfig(strategy="Default", dump_passes=True, compile_profiling=True,
                     analyze_auto_scopes_for_deps=True, save_kernels_dir=str(tmp_path))
    assert full.compile_kwargs() == {"strategy": "Default", "dump_passes": True, "profiling": True,
                                     "analyze_auto_scopes_for_deps": True, "output_dir": str(tmp_path)}
    with pytest.raises(PtoArgumentError, match="DistributedConfig"):  # a multi-chip program's (test_l3.py)
        RunConfig(distributed_config=object())


# -- ir.compile: PyPTO's options ----------------------------------------------------------------------


def test_compile_dump_passes_and_profiling_write_their_files(tmp_path):
    z = torch.zeros(R, C)
    program = add_kernel.trace(z, z, z)  # before the passes: each pass is dumped
    c = ir.compile(program, platform="sim", output_dir=tmp_path, dump_passes=True, profiling=True)
    dumps = sorted(p.name for p in (tmp_path / "passes_dump").iterdir())
    assert dumps[0] == "00_input.txt" and len(dumps) >= 3
    assert "add_kernel" in (tmp_path / "passes_dump" / dumps[-1]).read_text()
    import json

    profile = json.loads((tmp_path / "report" / "pipeline_profile.json").read_text())
    assert profile["program"] == "add_kernel" and profile["passes_s"] >= 0 and "cache_hit" in profile
    assert (tmp_path / "report" / "pipeline_profile.txt").read_text().startswith("compile profile")
    a, b = torch.randn(R, C), torch.randn(R, C)
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        torch.testing.assert_close(w.run(c, a, b), a + b)


def test_compile_accepts_the_inert_options_and_refuses_what_it_cannot_do(tmp_path):
    z = torch.zeros(R, C)
    program = add_kernel.lower(z, z, z)
    plain = ir.compile(program, platform="sim")
    inert = ir.compile(program, platform="sim", strategy="Default", skip_ptoas=True, verification_level=2,
                       memory_planner="PTOAS", diagnostic_phase=None, disabled_diagnostics=set(),
                       analyze_auto_scopes_for_deps=True, enable_pypto_l0c_double_buffer=False,
                       emit_source_loc=True, dump_ptoas_passes=False, backend_type="sim", distributed_config=None)
    assert inert.symbol == plain.symbol and inert.output_dir == plain.output_dir  # no effect: the same build
    with pytest.raises(PtoArgumentError, match="skip_ptoas must be a bool"):
        ir.compile(program, platform="sim", skip_ptoas="yes")
    with pytest.raises(PtoArgumentError, match="backend_type"):
        ir.compile(program, platform="sim", backend_type="CCE")  # PyPTO's Ascend910B / Ascend950 name the sim
    with pytest.raises(PtoArgumentError, match="must be a DistributedConfig"):
        ir.compile(program, platform="sim", distributed_config=object())
    from pypto_async.ir.distributed_compiled_program import DistributedConfig

    # as PyPTO's: a program without a HOST function compiles for one chip whatever the distributed config
    one = ir.compile(program, platform="sim", distributed_config=DistributedConfig(device_ids=[0, 1]))
    assert one.symbol == plain.symbol
    with pytest.raises(PtoArgumentError, match="unknown options"):
        ir.compile(program, platform="sim", no_such_option=1)


# -- benchmark: BenchmarkStats under PyPTO's names ----------------------------------------------------------


def test_benchmark_returns_pypto_stats_with_real_device_times(add_compiled, ab, capsys):
    from pypto_async.runtime import BenchmarkResult, BenchmarkStats, benchmark

    a, b = ab
    out = poison()
    stats = benchmark(add_compiled, (a, b, out), rounds=5, warmup=2, platform="a2a3sim", device_id=0,
                      config=RunConfig(**SMALL))
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)
    assert isinstance(stats, BenchmarkStats) and BenchmarkResult is BenchmarkStats
    assert (stats.rounds, stats.warmup, len(stats.samples), len(stats.host_wall_us)) == (5, 2, 5, 5)
    assert stats.samples is stats.device_wall_us and all(d > 0 for d in stats.device_wall_us)
    assert not stats.all_zero_device
    assert stats.device_wall_us_min <= stats.device_wall_us_median <= stats.device_wall_us_max
    assert stats.device_us_median == stats.device_wall_us_median == stats.median("device_wall_us")
    assert stats.device_us_mean == pytest.approx(sum(stats.samples) / 5)
    assert stats.per_round("device") == list(stats.device_wall_us) == stats.per_round("effective")
    assert stats.per_round("host") == list(stats.host_wall_us) and stats.per_rank() == {}
    with pytest.raises(PtoArgumentError, match="metric"):
        stats.per_round("union")
    assert all(inv.device_wall_us > 0 and inv.host_wall_us > 0 for inv in stats.invocations)
    # On the host's clock (timing="host") each round's device span lies inside its host span.  The default modeled
    # clock promises no such thing: it says what the profile's chip would take, which may exceed what the host took.
    on_host = benchmark(add_compiled, (a, b, out), rounds=3, warmup=1, config=RunConfig(**SMALL, timing="host"))
    for inv in on_host.invocations:
        assert 0 < inv.device_wall_us <= inv.host_wall_us
    # The tree prints both spans.
    stats.print_tree(0)
    stats.print_mean_tree(spread="both")
    printed = capsys.readouterr().out
    assert "launch[0]" in printed and "device_wall [dev]" in printed and "mean of 5 launches" in printed
    assert "rounds=5, warmup=2" in str(stats)
    inputs_only = benchmark(add_compiled, (a, b), rounds=2, warmup=0, config=RunConfig(**SMALL))  # return style
    assert len(inputs_only.samples) == 2 and all(d > 0 for d in inputs_only.samples)


# -- DFX per call: dfx_outputs/ with PyPTO's names ---------------------------------------------------------


def test_per_call_dfx_writes_dfx_outputs(add_compiled, ab, tmp_path):
    import json

    from pypto_async.runtime._dfx import dfx_dir

    a, b = ab
    cfg = RunConfig(platform="a2a3sim", enable_chip_swimlane=True, enable_dump_args=2, enable_dep_gen=True,
                    enable_scope_stats=True, enable_pmu=2, save_kernels_dir=str(tmp_path), **SMALL)
    out = poison()
    with ChipWorker(config=RunConfig(platform="a2a3sim", **SMALL)) as w:
        h = w.register(add_compiled)
        assert h(a, b, out, config=cfg) is out
        c = h(a, b, config=cfg)  # return style, a second call into the same directory
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)
    d = dfx_dir(add_compiled, cfg)
    assert d == tmp_path / "dfx_outputs"
    # args_dump: what each launch read before it ran and what it wrote, byte for byte.
    manifest = json.loads((d / "args_dump" / "args_dump.json").read_text())
    assert manifest["level"] == 2 and manifest["program"] == add_compiled.name
    first = manifest["entries"][0]["call"]
    mine = {(e["param"], e["stage"]): e for e in manifest["entries"] if e["call"] == first}
    assert set(mine) == {("a", "before"), ("b", "before"), ("out", "after")}
    read = lambda e: torch.from_numpy(np.frombuffer((d / "args_dump" / e["file"]).read_bytes(), np.float32).reshape(R, C).copy())
    torch.testing.assert_close(read(mine[("a", "before")]), a, rtol=0, atol=0)
    torch.testing.assert_close(read(mine[("out", "after")]), a + b, rtol=0, atol=0)
    assert len({e["call"] for e in manifest["entries"]}) == 2
    # The swimlane of each call: a Perfetto trace with its launch.
    traces = sorted(d.glob("merged_swimlane_*.json"))
    assert len(traces) == 2
    events = json.loads(traces[0].read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("cat") == "launch") == 1
    # scope_stats: JSON lines, one per stream per call, with the ring high-water marks.
    lines = [json.loads(line) for line in (d / "scope_stats" / "scope_stats.jsonl").read_text().splitlines()]
    assert lines and {line["call"] for line in lines} == {first, first + 1}
    assert all("program" in line for line in lines)
    deps = json.loads((d / "deps.json").read_text())
    assert [t["name"] for t in deps["tasks"]] and deps["program"] == add_compiled.name
    assert not (d / "pmu.csv").exists()  # the sim's cores have no counters


def test_dump_args_level_one_writes_only_the_manifest(add_compiled, ab, tmp_path):
    import json

    a, b = ab
    cfg = RunConfig(enable_dump_args=True, save_kernels_dir=str(tmp_path), **SMALL)
    assert cfg.enable_dump_args == 1
    out = poison()
    add_compiled(a, b, out, config=cfg)
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)
    dump = tmp_path / "dfx_outputs" / "args_dump"
    assert json.loads((dump / "args_dump.json").read_text())["entries"] == []
    assert sorted(p.name for p in dump.iterdir()) == ["args_dump.json"]


@pytest.mark.anyio
async def test_per_call_dfx_is_refused_in_async_mode(add_compiled, ab, tmp_path, anyio_backend):
    a, b = ab
    async with ChipWorker(config=RunConfig(**SMALL)) as w:
        before = w.stats().commands_submitted
        with pytest.raises(PtoNotSupported, match="sync mode"):
            w.run(add_compiled, a, b, poison(), config=RunConfig(enable_chip_swimlane=1,
                                                               save_kernels_dir=str(tmp_path)))
        assert w.stats().commands_submitted == before
        torch.testing.assert_close(await w.run(add_compiled, a, b), a + b)


def test_an_unregistered_handle_is_refused_inside_a_graph_capture(add_compiled):
    # The capture path refuses it as the launch path does: PtoClosedError, not a bad argument.
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        h = w.register(add_compiled)
        ts = [w.alloc_tensor((R, C), np.float32, init=np.ones((R, C), np.float32)) for _ in range(3)]
        h.unregister()
        with pytest.raises(PtoClosedError, match="unregistered"):
            with w.capture(name="step"):
                h(*ts)
        for t in ts:
            w.free_tensor(t)


def _twice(rows: int, cols: int):
    @pl.jit
    def twice(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            tx = pl.load(x, [0, 0], [rows, cols])
            pl.store(pl.add(tx, tx), [0, 0], out)
        return out

    return twice


# 256x256: past torch's grain size, where torch.zeros woke its thread pool; 16x32: small enough
# for the allocator to hand a just-freed block straight back.
@tiered("shape", [(256, 256), (R, C)], fast=[(256, 256)], ids=["256x256", "16x32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_return_style_torch_outputs_are_tensors_of_their_own(dtype, shape):
    # The outputs are made without torch.zeros (its intra-op pool cost milliseconds on a small host,
    # benchmarks/bench_calls.py): they must still be torch tensors of the parameter's dtype and
    # shape holding the kernel's result (not the bytes of freed memory), each with memory of its
    # own that the caller may write.
    torch.manual_seed(2)
    x = torch.randn(*shape).to(dtype)
    compiled = _twice(*shape).compile(x, x)
    want = x + x
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        h = w.register(compiled)
        first = h(x)
        for _ in range(3):
            junk = torch.full(shape, float("nan"), dtype=dtype)
            del junk  # freed memory full of NaN, which the next allocation may well reuse
            got = h(x)
            assert isinstance(got, torch.Tensor) and got.dtype == dtype and tuple(got.shape) == shape
            assert got.is_contiguous() and got.untyped_storage().resizable()  # torch's own memory
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            assert got.data_ptr() != first.data_ptr()
            got.fill_(float("nan"))  # the caller's to write: later outputs are unaffected
        torch.testing.assert_close(first, want, rtol=0, atol=0)
