"""PyPTO's system-test case classes, written here over pypto_async's public API.

A test case names its tensors (:class:`TensorSpec`: shape, :class:`DataType`, an initial value, whether it
is an output), its scalars (:class:`ScalarSpec`), a ``@pl.program`` and a torch reference
(``compute_expected``); :class:`~harness.core.test_runner.TestRunner` compiles, runs and compares it.

Platforms: the simulator is ``"sim"`` (the copied tests' ``"a2a3sim"``/``"a5sim"`` read ``"sim"``).  The
on-board ids stay as PyPTO's so that a test parametrized over them only is skipped, as PyPTO skips it
off-board.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch

from pypto_async.backend import BackendType
from pypto_async.ir.pass_manager import OptimizationStrategy
from pypto_async.runtime import RunConfig

ONBOARD_ONLY = "onboard only: PyPTO runs it on an a2a3/a5 board, and skips it off-board"

SIM_PLATFORM_IDS: tuple[str, ...] = ("sim",)
ONBOARD_PLATFORM_IDS: tuple[str, ...] = ("a2a3", "a5")
ALL_PLATFORM_IDS: tuple[str, ...] = (*SIM_PLATFORM_IDS, *ONBOARD_PLATFORM_IDS)

SIM_PLATFORMS = [pytest.param(p, id=p) for p in SIM_PLATFORM_IDS]
ONBOARD_PLATFORMS = [pytest.param(p, id=p, marks=pytest.mark.skip(reason=ONBOARD_ONLY)) for p in ONBOARD_PLATFORM_IDS]
PLATFORMS = SIM_PLATFORMS  # off-board, PyPTO runs only the simulator variants of these


def platform_to_backend(platform: str) -> BackendType:
    """The backend a platform names (the simulator is PyPTO's default part, the 910B)."""
    if platform not in ALL_PLATFORM_IDS:
        raise ValueError(f"Unknown platform {platform!r}. Expected one of {ALL_PLATFORM_IDS}.")
    return BackendType.Ascend950 if platform == "a5" else BackendType.Ascend910B


class DataType(enum.Enum):
    """A test tensor's element type, and the torch dtype its host tensor has."""

    BF16 = "bf16"
    FP32 = "fp32"
    FP16 = "fp16"
    FP8E4M3FN = "fp8e4m3fn"
    FP8E8M0 = "fp8e8m0"
    FP4 = "fp4"
    INT32 = "int32"
    UINT32 = "uint32"
    INT16 = "int16"
    UINT16 = "uint16"
    INT8 = "int8"
    UINT8 = "uint8"
    INT64 = "int64"
    BOOL = "bool"

    @property
    def torch_dtype(self) -> torch.dtype:
        # torch has no uint32/uint16 arithmetic: PyPTO keeps their bits in the signed type of that width.
        name = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "uint32": "int32", "uint16": "int16",
                "fp8e4m3fn": "float8_e4m3fn", "fp8e8m0": "float8_e8m0fnu", "fp4": "float4_e2m1fn_x2"}
        dtype = getattr(torch, name.get(self.value, self.value), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"PyTorch does not provide a dtype for {self.name}")
        return dtype


@dataclass
class TensorSpec:
    """A tensor argument: ``init_value`` None (zeros), a number, a tensor, or a callable making one."""

    name: str
    shape: list[int]
    dtype: DataType
    init_value: int | float | torch.Tensor | Callable | None = None
    is_output: bool = False

    def create_tensor(self) -> torch.Tensor:
        dtype, value = self.dtype.torch_dtype, self.init_value
        if value is None:
            return torch.zeros(self.shape, dtype=dtype)
        if isinstance(value, (int, float)):
            return torch.full(self.shape, value, dtype=dtype)
        if isinstance(value, torch.Tensor):
            return value.to(dtype=dtype).clone()
        if value in (torch.randn, torch.rand, torch.zeros, torch.ones):
            return value(self.shape, dtype=dtype)
        return torch.as_tensor(value(), dtype=dtype)


_CTYPES = ("int64", "int32", "uint64", "uint32", "float", "double")


@dataclass
class ScalarSpec:
    """A scalar argument, passed after the tensors: ``ctype`` one of int64, int32, uint64, uint32, float, double."""

    name: str
    value: int | float
    ctype: str = "int64"

    def __post_init__(self) -> None:
        if self.ctype not in _CTYPES:
            raise ValueError(f"Unsupported ctype {self.ctype!r} for scalar {self.name!r}. Supported: {list(_CTYPES)}")


class CaseConfig:
    """A case's RunConfig, settable field by field as PyPTO's (``self.config.rtol = 1e-3``).

    pypto_async's RunConfig is frozen; setting a field here replaces the config with a changed copy.
    """

    def __init__(self, config: RunConfig):
        object.__setattr__(self, "run_config", config)

    def __getattr__(self, name: str):
        return getattr(self.run_config, name)

    def __setattr__(self, name: str, value) -> None:
        object.__setattr__(self, "run_config", self.run_config.replace(**{name: value}))


class PTOTestCase(ABC):
    """A system test: tensors, a program, and a torch reference that fills the expected outputs in place."""

    __test__ = False

    def __init__(self, config: RunConfig | None = None, *, platform: str | None = None,
                 backend_type: BackendType | None = None, strategy: OptimizationStrategy | None = None,
                 memory_planner: Any = None, enable_pypto_l0c_double_buffer: bool | None = None):
        self.config = CaseConfig(config or RunConfig())
        self._platform = platform
        self._backend = backend_type
        self._strategy = strategy
        self._planner = memory_planner
        self._l0c = enable_pypto_l0c_double_buffer
        self._tensor_specs: list[TensorSpec] | None = None
        self._scalar_specs: list[ScalarSpec] | None = None

    @abstractmethod
    def get_name(self) -> str: ...

    @abstractmethod
    def define_tensors(self) -> list[TensorSpec]: ...

    @abstractmethod
    def get_program(self) -> Any: ...

    @abstractmethod
    def compute_expected(self, tensors: dict[str, torch.Tensor], params: dict[str, Any] | None = None) -> None: ...

    def define_scalars(self) -> list[ScalarSpec]:
        return []

    def get_strategy(self) -> OptimizationStrategy:
        return self._strategy if self._strategy is not None else OptimizationStrategy.Default

    def get_memory_planner(self) -> Any:
        return self._planner

    def get_enable_pypto_l0c_double_buffer(self) -> bool | None:
        return self._l0c

    def get_platform(self) -> str | None:
        return self._platform

    def get_backend_type(self) -> BackendType:
        if self._platform is not None:
            return platform_to_backend(self._platform)
        return self._backend if self._backend is not None else BackendType.Ascend910B

    @property
    def tensor_specs(self) -> list[TensorSpec]:
        if self._tensor_specs is None:
            self._tensor_specs = self.define_tensors()
        return self._tensor_specs

    @property
    def scalar_specs(self) -> list[ScalarSpec]:
        if self._scalar_specs is None:
            self._scalar_specs = self.define_scalars()
        return self._scalar_specs
