"""Tiny hand-written C kernels for the runtime tests, with compiled-program handles.

Each kernel is C against ``pypto_async/include/pto_kernel.h``, built with
``cc -O2 -shared -fPIC`` for one element count ``N`` (baked in with ``-DN=``,
as a compiler would bake in static shapes) and wrapped in a :class:`Kernel`:
a frozen dataclass with exactly the attributes of
:mod:`pypto_async._signature` that the runtime reads.  No dependency on the
compiler, so the runtime tests stand on their own.

Kernels (``f32[N]`` tensors unless said):

``add(a: In, b: In, out: Out)``          out = a + b, spread over the blocks
``scale(x: In, alpha: FP32, out: Out)``  out = alpha * x
``inc(x: InOut)``                         x += 1
``noop(x: InOut)``                        does nothing (the empty launch)
``fail(x: In)``                           fails through ``blk->fail`` (PTO_EKERNEL)
``probe(x: In, out: Out, poison: FP32)``  out = x + (1000 if out held only `poison` on entry
                                         else 0); then scribbles -7777 over x on the device
``step(counter: InOut i64[1], expect: INT64)``  fails unless counter == expect; counter += 1
``copy(src: In, dst: Out)``               dst = src
``pair(a: In, lo: Out, hi: Out)``         lo = a - 1, hi = a + 1 (two outputs)
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from pypto_async._dtypes import FP32, INT64, DataType
from pypto_async._signature import IN, INOUT, OUT, SCALAR, ParamSpec

__all__ = ["Kernel", "KernelLib", "SOURCE"]

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "pypto_async" / "include"

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include "pto_kernel.h"

#ifndef N
#define N 1
#endif

static void span(const pto_block *blk, long n, long *lo, long *hi)
{
    long per = (n + blk->block_num - 1) / blk->block_num;
    *lo = (long)blk->block_idx * per;
    *hi = *lo + per;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

static float f32_arg(void *const *args, int i)
{
    float v;
    memcpy(&v, &args[i], sizeof(v));
    return v;
}

static int64_t i64_arg(void *const *args, int i)
{
    int64_t v;
    memcpy(&v, &args[i], sizeof(v));
    return v;
}

void k_add(const pto_block *blk, void *const *args)
{
    const float *a = args[0], *b = args[1];
    float *out = args[2];
    long lo, hi;
    span(blk, N, &lo, &hi);
    for (long i = lo; i < hi; i++) out[i] = a[i] + b[i];
}

void k_scale(const pto_block *blk, void *const *args)
{
    const float *x = args[0];
    float alpha = f32_arg(args, 1);
    float *out = args[2];
    long lo, hi;
    span(blk, N, &lo, &hi);
    for (long i = lo; i < hi; i++) out[i] = alpha * x[i];
}

void k_inc(const pto_block *blk, void *const *args)
{
    float *x = args[0];
    long lo, hi;
    span(blk, N, &lo, &hi);
    for (long i = lo; i < hi; i++) x[i] += 1.0f;
}

void k_noop(const pto_block *blk, void *const *args)
{
    (void)blk;
    (void)args;
}

void k_fail(const pto_block *blk, void *const *args)
{
    (void)args;
    blk->fail(blk, PTO_EKERNEL, "k_fail: failing on purpose");
}

void k_probe(const pto_block *blk, void *const *args)
{
    float *x = args[0];
    float *out = args[1];
    float poison = f32_arg(args, 2);
    int all_poison = 1;
    for (long i = 0; i < N; i++)
        if (out[i] != poison) all_poison = 0;
    for (long i = 0; i < N; i++) out[i] = x[i] + (all_poison ? 1000.0f : 0.0f);
    for (long i = 0; i < N; i++) x[i] = -7777.0f;
}

void k_step(const pto_block *blk, void *const *args)
{
    int64_t *counter = args[0];
    int64_t expect = i64_arg(args, 1);
    if (counter[0] != expect) {
        blk->fail(blk, PTO_EKERNEL, "k_step: launches ran out of order");
        return;
    }
    counter[0] += 1;
}

void k_pair(const pto_block *blk, void *const *args)
{
    const float *a = args[0];
    float *lo_out = args[1], *hi_out = args[2];
    long lo, hi;
    span(blk, N, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        lo_out[i] = a[i] - 1.0f;
        hi_out[i] = a[i] + 1.0f;
    }
}

void k_copy(const pto_block *blk, void *const *args)
{
    const float *src = args[0];
    float *dst = args[1];
    long lo, hi;
    span(blk, N, &lo, &hi);
    for (long i = lo; i < hi; i++) dst[i] = src[i];
}
"""


def _t(name: str, direction: str, n: int, dtype: DataType = FP32) -> ParamSpec:
    return ParamSpec(name, direction, (n,), dtype)


def _s(name: str, dtype: DataType) -> ParamSpec:
    return ParamSpec(name, SCALAR, (), dtype)


_SIGNATURES = {
    "add": lambda n: (_t("a", IN, n), _t("b", IN, n), _t("out", OUT, n)),
    "scale": lambda n: (_t("x", IN, n), _s("alpha", FP32), _t("out", OUT, n)),
    "inc": lambda n: (_t("x", INOUT, n),),
    "noop": lambda n: (_t("x", INOUT, n),),
    "fail": lambda n: (_t("x", IN, n),),
    "probe": lambda n: (_t("x", IN, n), _t("out", OUT, n), _s("poison", FP32)),
    "step": lambda n: (ParamSpec("counter", INOUT, (1,), INT64), _s("expect", INT64)),
    "copy": lambda n: (_t("src", IN, n), _t("dst", OUT, n)),
    "pair": lambda n: (_t("a", IN, n), _t("lo", OUT, n), _t("hi", OUT, n)),
}


@dataclass(frozen=True)
class Kernel:
    """A compiled-program handle with the attributes the runtime reads."""

    name: str
    platform: str
    params: tuple[ParamSpec, ...]
    lib_path: Path
    symbol: str
    block_num: int = 1
    param_names: tuple[str, ...] = field(default=())
    output_indices: tuple[int, ...] = field(default=())
    has_return: bool = True


class KernelLib:
    """Build the kernels into `directory`, once per element count; hand out :class:`Kernel` s."""

    def __init__(self, directory: os.PathLike | str, platform: str = "sim"):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.platform = platform
        self._built: dict[int, Path] = {}
        self._lock = threading.Lock()

    def _library(self, n: int) -> Path:
        with self._lock:
            path = self._built.get(n)
            if path is None:
                src = self.directory / "kernels.c"
                if not src.exists():
                    src.write_text(SOURCE)
                path = self.directory / f"kernels_n{n}.so"
                subprocess.run(
                    [os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-std=c11", f"-DN={n}",
                     f"-I{INCLUDE}", "-o", str(path), str(src)],
                    check=True,
                )
                self._built[n] = path
            return path

    def get(self, name: str, n: int = 64, *, blocks: int = 1, platform: str | None = None) -> Kernel:
        """Return kernel `name` for `n` elements, launched over `blocks` blocks."""
        params = _SIGNATURES[name](n)
        outputs = tuple(i for i, p in enumerate(params) if p.direction in (OUT, INOUT))
        return Kernel(
            name=name,
            platform=platform or self.platform,
            params=params,
            lib_path=self._library(n),
            symbol=f"k_{name}",
            block_num=blocks,
            param_names=tuple(p.name for p in params),
            output_indices=outputs,
            has_return=bool(outputs),
        )
