"""RunConfig: fields, validation messages naming the field, aliases (runtime/_config.py)."""

from __future__ import annotations

import dataclasses

import pytest

from pypto_async.errors import PtoArgumentError
from pypto_async.runtime import RunConfig
from pypto_async.runtime._config import normalize_platform

SEED_FIELDS = {
    "platform", "device_id", "enable_chip_swimlane", "enable_dep_gen", "enable_pmu", "enable_dump_args",
    "enable_scope_stats", "ring_task_window", "ring_heap", "ring_dep_pool", "aicpu_thread_num", "rtol",
    "atol", "golden_data_dir", "save_kernels", "save_kernels_dir", "codegen_only",
}


def test_has_the_seed_fields_and_the_device_shape():
    names = {f.name for f in dataclasses.fields(RunConfig)}
    assert SEED_FIELDS | {"cores", "copy_engines", "device_memory"} <= names


def test_defaults():
    cfg = RunConfig()
    assert cfg.platform == "sim" and cfg.device_platform == "sim"
    assert cfg.ring_task_window is None and cfg.codegen_only is False  # None: the driver's default, as PyPTO
    assert cfg.compile_kwargs() == {}


@pytest.mark.parametrize("alias", ["sim", "a2a3sim", "a5sim", "A5SIM"])
def test_platform_aliases(alias):
    assert RunConfig(platform=alias).device_platform == "sim"
    assert normalize_platform(alias) == "sim"


def test_one_platform_table_serves_the_compiler_and_the_runtime(monkeypatch):
    from pypto_async import _signature, ir

    assert ir.PLATFORMS is _signature.PLATFORMS
    monkeypatch.setitem(_signature.PLATFORMS, "b7sim", "sim")  # an alias added in one place...
    assert RunConfig(platform="b7sim").device_platform == "sim"  # ...is one to the runtime
    assert "b7sim" in ir.PLATFORMS  # ...and to ir.compile


def test_compile_kwargs_forwards_save_kernels_dir(tmp_path):
    assert RunConfig(save_kernels_dir=str(tmp_path)).compile_kwargs() == {"output_dir": str(tmp_path)}
    assert RunConfig(save_kernels_dir=tmp_path).compile_kwargs() == {"output_dir": str(tmp_path)}


@pytest.mark.parametrize(
    "field, value",
    [
        ("platform", ""),
        ("platform", 3),
        ("device_id", -1),
        ("ring_task_window", 3),
        ("ring_task_window", 0),
        ("ring_heap", 16),
        ("ring_dep_pool", 0),
        ("aicpu_thread_num", 0),
        ("cores", "2"),
        ("copy_engines", 1000),
        ("device_memory", 100),
        ("spin_us", -1),
        ("enable_chip_swimlane", 5),
        ("enable_chip_swimlane", "4"),
        ("enable_dump_args", 3),
        ("enable_pmu", -1),
        ("ring_heap", [1024, 1024]),
        ("ring_task_window", [0, 3, 0, 0]),
        ("codegen_only", "yes"),
        ("rtol", -1.0),
        ("atol", "0"),
        ("golden_data_dir", 5),
        ("device_id", True),  # a bool is never an int
        ("ring_heap", True),
        ("cores", True),
        ("spin_us", False),
        ("rtol", True),
    ],
)
def test_validation_names_the_field(field, value):
    with pytest.raises(PtoArgumentError, match=rf"RunConfig\.{field} "):
        RunConfig(**{field: value})


def test_frozen_and_replace():
    cfg = RunConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.cores = 3
    assert cfg.replace(cores=3).cores == 3
    with pytest.raises(PtoArgumentError, match="RunConfig.cores"):
        cfg.replace(cores=0)


def test_device_fields():
    fields = RunConfig(ring_task_window=8, enable_chip_swimlane=True, cores=1, spin_us=0)._device_fields()
    assert fields["ring_task_window"] == 8 and fields["trace"] == 1 and fields["cores"] == 1
    assert fields["spin_us"] == 1  # the least spinning the driver takes
    assert "copy_engines" not in fields
