"""Device profiles: the chip the device model times the simulator's work on.

A :class:`DeviceProfile` is a frozen dataclass of figures whose names carry
their units (``pickup_us``, ``gm_gbps``, ``clock_ghz``, ``aiv_cores`` ...).
``RunConfig(platform="a2a3sim")`` selects :data:`A2A3` (Ascend 910B),
``"a5sim"`` :data:`A5` (Ascend 950), ``"sim"`` :data:`SIM` (a small generic
chip); ``RunConfig(device_profile=...)`` takes your own: a profile, a dict of
its fields, or the path of a JSON file of them (:meth:`DeviceProfile.to_json`
writes one).  ``ChipWorker.device_profile`` is the one in use.

The driver gets the figures it models with as a plain C struct
(``pto_device_profile``, :meth:`DeviceProfile._to_c`) through
``pto_device_set_profile``; docs/device_model.md gives every figure's source
and what the model leaves out.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from typing import Any

from .._driver import ffi
from .._scalars import is_int, is_number
from ..errors import PtoArgumentError

__all__ = ["DeviceProfile", "A2A3", "A5", "SIM", "PROFILES", "profile_for", "resolve_profile"]

_KIB = 1024


@dataclass(frozen=True)
class DeviceProfile:
    """The figures of one chip that the device model times work with.

    Counts
    ------
    name : str
        What to call it (``"a2a3"``).
    aic_cores, aiv_cores : int
        Cube (AIC) and vector (AIV) cores.  A task or block with cube work
        runs on an AIC, any other on an AIV.
    aiv_per_aic : int
        How many AIVs pair with one AIC into a cluster (mixed kernels).
    copy_engines : int
        DMA engines serving copies (host link and GM).

    Latencies (µs)
    --------------
    pickup_us : float
        A task's or block's ``[dispatch, start]`` on its core.
    orch_us_per_task : float
        The orchestrator's cost to submit one program task.
    min_kernel_us : float
        The least one block or task takes, however little work it counts
        (a kernel that reports no work takes exactly this).
    host_link_latency_us : float
        Added to every copy over the host link.

    Bandwidths
    ----------
    gm_gbps : float
        GM (HBM) GB/s: device-to-device copies (each byte read and written)
        and memsets.
    host_link_gbps : float
        Host link GB/s: host-to-device, device-to-host and peer copies.
    transfer_granule_bytes : int
        A load or store row costs at least this many bytes of its pipe: the
        recommended innermost transfer granularity (PyPTO's backend: 512 B on
        a2a3, 128 B on a5).  Compile-time hint PH001 reads it too.

    On-chip buffers (bytes)
    -----------------------
    l1_bytes, l0a_bytes, l0b_bytes, l0c_bytes, ub_bytes, bias_bytes : int
        Per core, what the compiler allocates from (PyPTO's backend tables:
        memory spaces Mat, Left, Right, Acc, Vec, Bias).  Not timed: the
        compile-time hints (``report/perf_hints.log``) read them, so a
        profile and its hints never disagree.
    l2_line_bytes : int
        The L2 cache line (512 B), quoted by hint PH001.

    Pipes (per core, per cycle)
    ---------------------------
    mte2_bytes_per_cycle, mte1_bytes_per_cycle, mte3_bytes_per_cycle, fixpipe_bytes_per_cycle : float
        Loads GM to on-chip, moves between on-chip buffers, stores to GM,
        cube results out of L0C.
    vec_simple_bytes_per_cycle, vec_special_bytes_per_cycle, vec_reduce_bytes_per_cycle : float
        Vector bytes per cycle by op class (``PTO_VEC_SIMPLE``,
        ``_SPECIAL``, ``_REDUCE`` in pto_kernel.h); an op's vector bytes are
        its elements times the widest element it reads or writes.
    cube_f16_macs_per_cycle, cube_f32_macs_per_cycle, cube_i8_macs_per_cycle : float
        Multiply-accumulates per cycle by input dtype.
    clock_ghz : float
        Core clock, GHz.

    Raises
    ------
    PtoArgumentError
        A field of the wrong type or out of range; the message names it.
    """

    name: str
    aic_cores: int
    aiv_cores: int
    aiv_per_aic: int
    copy_engines: int
    clock_ghz: float
    pickup_us: float
    orch_us_per_task: float
    min_kernel_us: float
    gm_gbps: float
    transfer_granule_bytes: int
    host_link_gbps: float
    host_link_latency_us: float
    l1_bytes: int
    l0a_bytes: int
    l0b_bytes: int
    l0c_bytes: int
    ub_bytes: int
    mte2_bytes_per_cycle: float
    mte1_bytes_per_cycle: float
    mte3_bytes_per_cycle: float
    fixpipe_bytes_per_cycle: float
    vec_simple_bytes_per_cycle: float
    vec_special_bytes_per_cycle: float
    vec_reduce_bytes_per_cycle: float
    cube_f16_macs_per_cycle: float
    cube_f32_macs_per_cycle: float
    cube_i8_macs_per_cycle: float
    bias_bytes: int = 1 * _KIB
    l2_line_bytes: int = 512

    def __post_init__(self) -> None:
        def fail(field: str, why: str) -> None:
            raise PtoArgumentError(f"DeviceProfile.{field} {why}, not {getattr(self, field)!r}")

        if not isinstance(self.name, str) or not self.name:
            fail("name", "must be a non-empty str")
        for f in dataclasses.fields(self):
            if f.name == "name":
                continue
            value = getattr(self, f.name)
            if f.type == "int" or f.type is int:
                if not is_int(value):
                    fail(f.name, "must be an int")
                least = 0 if f.name in ("aic_cores", "aiv_cores") else 1
                if not least <= value <= (1 << 40):
                    fail(f.name, f"must be >= {least}")
            else:
                if not is_number(value) or isinstance(value, bool) or not math.isfinite(value):
                    fail(f.name, "must be a finite number")
                zero_ok = f.name.endswith("_us")
                if value < 0 or (value == 0 and not zero_ok):
                    fail(f.name, ">= 0" if zero_ok else "must be > 0")
                object.__setattr__(self, f.name, float(value))
        if self.aic_cores + self.aiv_cores == 0:
            fail("aiv_cores", "and aic_cores must not both be 0")
        for name in ("aic_cores", "aiv_cores", "copy_engines"):
            if getattr(self, name) > 1024:
                fail(name, "must be at most 1024")

    @property
    def cores(self) -> int:
        """All modeled cores: AIC then AIV (engine ids ``0 .. cores-1``; copy engines follow)."""
        return self.aic_cores + self.aiv_cores

    def replace(self, **changes: Any) -> DeviceProfile:
        """Return a copy with some figures changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict (what :meth:`from_dict` reads)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict) -> DeviceProfile:
        """Build a profile from a dict of its fields (every one without a default).

        Raises
        ------
        PtoArgumentError
            Unknown or missing fields, or a bad value.
        """
        if not isinstance(doc, dict):
            raise PtoArgumentError(f"a device profile must be a dict of its fields, not {type(doc).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(doc) - set(known))
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in doc and f.default is dataclasses.MISSING]
        if unknown or missing:
            parts = ([f"unknown field(s) {', '.join(unknown)}"] if unknown else []) + (
                [f"missing field(s) {', '.join(missing)}"] if missing else [])
            raise PtoArgumentError(f"device profile: {'; '.join(parts)}")
        return cls(**doc)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> DeviceProfile:
        """Read a profile from a JSON file of its fields (:meth:`to_json` writes one)."""
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            raise PtoArgumentError(f"device profile {os.fspath(path)!r}: {exc}") from None
        return cls.from_dict(doc)

    def to_json(self, path: str | os.PathLike) -> None:
        """Write the profile as JSON to ``path``."""
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")

    def _to_c(self):
        """The ``pto_device_profile`` the driver models with (a new cdata)."""
        p = ffi.new("pto_device_profile *")
        p.aic_cores = self.aic_cores
        p.aiv_cores = self.aiv_cores
        p.copy_engines = self.copy_engines
        for name in ("clock_ghz", "pickup_us", "orch_us_per_task", "min_kernel_us", "gm_gbps",
                     "host_link_gbps", "host_link_latency_us", "mte2_bytes_per_cycle",
                     "mte1_bytes_per_cycle", "mte3_bytes_per_cycle", "fixpipe_bytes_per_cycle"):
            setattr(p, name, getattr(self, name))
        p.transfer_granule_bytes = float(self.transfer_granule_bytes)
        p.vec_bytes_per_cycle = [self.vec_simple_bytes_per_cycle, self.vec_special_bytes_per_cycle,
                                 self.vec_reduce_bytes_per_cycle]
        p.cube_macs_per_cycle = [self.cube_f16_macs_per_cycle, self.cube_f32_macs_per_cycle,
                                 self.cube_i8_macs_per_cycle]
        return p


#: Ascend 910B (PyPTO's a2a3).  Sources: docs/device_model.md.
A2A3 = DeviceProfile(
    name="a2a3",
    aic_cores=24, aiv_cores=48, aiv_per_aic=2, copy_engines=2,
    clock_ghz=1.8,
    pickup_us=0.8, orch_us_per_task=0.2, min_kernel_us=1.0,
    gm_gbps=1600.0, transfer_granule_bytes=512,
    host_link_gbps=25.0, host_link_latency_us=10.0,
    l1_bytes=512 * _KIB, l0a_bytes=64 * _KIB, l0b_bytes=64 * _KIB, l0c_bytes=128 * _KIB,
    ub_bytes=184 * _KIB, bias_bytes=1 * _KIB, l2_line_bytes=512,
    mte2_bytes_per_cycle=64.0, mte1_bytes_per_cycle=256.0, mte3_bytes_per_cycle=64.0,
    fixpipe_bytes_per_cycle=128.0,
    vec_simple_bytes_per_cycle=256.0, vec_special_bytes_per_cycle=64.0, vec_reduce_bytes_per_cycle=128.0,
    cube_f16_macs_per_cycle=4096.0, cube_f32_macs_per_cycle=1024.0, cube_i8_macs_per_cycle=8192.0,
)

#: Ascend 950 (PyPTO's a5): 36 AIV per PyPTO's collectives guide; buffers and the 128 B transfer
#: granularity from PyPTO's a5 backend; the pipes as a2a3 (estimates).
A5 = A2A3.replace(name="a5", aic_cores=18, aiv_cores=36, transfer_granule_bytes=128,
                  l0c_bytes=256 * _KIB, ub_bytes=240 * _KIB, bias_bytes=4 * _KIB)

#: A small generic chip ("sim"): a few cores of each kind, the a2a3 pipes.
SIM = A2A3.replace(name="sim", aic_cores=2, aiv_cores=4)

#: The built-in profiles by name.
PROFILES: dict[str, DeviceProfile] = {"a2a3": A2A3, "a5": A5, "sim": SIM}

_BY_PLATFORM = {"a2a3sim": "a2a3", "a2a3": "a2a3", "a5sim": "a5", "a5": "a5", "sim": "sim"}


def profile_for(platform: str) -> DeviceProfile:
    """The built-in profile a platform name selects (``"a2a3sim"``: :data:`A2A3`; unknown: :data:`SIM`)."""
    return PROFILES[_BY_PLATFORM.get(str(platform).strip().lower(), "sim")]


def resolve_profile(value, platform: str) -> DeviceProfile:
    """The profile ``RunConfig(device_profile=value, platform=platform)`` means.

    ``None``: the platform's (:func:`profile_for`); a :class:`DeviceProfile`:
    itself; a built-in's name (``"a2a3"``); a dict of fields; a path to a JSON
    file of them.

    Raises
    ------
    PtoArgumentError
        Anything else, or a bad file or field.
    """
    if value is None:
        return profile_for(platform)
    if isinstance(value, DeviceProfile):
        return value
    if isinstance(value, dict):
        return DeviceProfile.from_dict(value)
    if isinstance(value, str) and value in PROFILES:
        return PROFILES[value]
    if isinstance(value, (str, os.PathLike)):
        return DeviceProfile.from_json(value)
    raise PtoArgumentError("RunConfig.device_profile must be None, a DeviceProfile, a profile name "
                           f"({', '.join(PROFILES)}), a dict or a JSON path, not {type(value).__name__}")
