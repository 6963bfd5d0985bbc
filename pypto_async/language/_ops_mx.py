"""MX block-scale matmul (PyPTO's A5 ``tile.matmul_mx`` family).

The OCP MX format: FP8E4M3FN data, and one FP8E8M0 scale (a power of two,
``2**(code - 127)``) per block of 32 elements along K.  ``lhs_scale`` is
``[M, K/32]`` (one per row and block), ``rhs_scale`` ``[K/32, N]``; the
product is FP32 in Acc::

    out[i, j] = sum_k (lhs[i, k] * lhs_scale[i, k // 32]) * (rhs[k, j] * rhs_scale[k // 32, j])

Every scaled element and every product is exact in FP32; only the sums
round.  The data tiles come from ``pl.Mem.Left`` / ``pl.Mem.Right`` (or Vec,
Mat), the scales from ``pl.Mem.LeftScale`` / ``pl.Mem.RightScale`` (or Vec,
Mat).  Both data tiles must be FP8E4M3FN: an FP4 lhs is ``pl.cast`` to
FP8E4M3FN first, as PyPTO asks; FP4 x FP4 is not supported.
"""

from __future__ import annotations

import enum

from .._scalars import is_int
from ..errors import PtoCompileError
from ..ir._infer import check_matmul_acc
from ..ir._nodes import Matmul, MatmulAcc
from ._memory import _tile, record
from ._tracer import Tile, current, user_loc

__all__ = ["matmul_mx", "matmul_mx_acc", "matmul_mx_bias"]
# MxLayout's members are pl.MX_A_ZZ / pl.MX_B_NN (language/__init__).


def _operands(op: str, lhs, lhs_scale, rhs, rhs_scale):
    return (_tile(lhs, op, "lhs"), _tile(lhs_scale, op, "lhs_scale"), _tile(rhs, op, "rhs"),
            _tile(rhs_scale, op, "rhs_scale"))


def matmul_mx(lhs, lhs_scale, rhs, rhs_scale) -> Tile:
    """Return the MX block-scaled product of FP8E4M3FN ``lhs`` ``[M, K]`` and ``rhs`` ``[K, N]`` (FP32, in Acc).

    ``lhs_scale`` ``[M, K/32]`` and ``rhs_scale`` ``[K/32, N]`` are FP8E8M0:
    each scales its 32-element block of K.  M must be a multiple of 16, N of
    32, K of 64 (the cube's MX tile).
    """
    current("pl.matmul_mx")
    a, sa, b, sb = _operands("pl.matmul_mx", lhs, lhs_scale, rhs, rhs_scale)
    return record(Matmul(a.var, b.var, a_scale=sa.var, b_scale=sb.var), "pl.matmul_mx")


def matmul_mx_acc(acc, lhs, lhs_scale, rhs, rhs_scale) -> Tile:
    """Add :func:`matmul_mx`'s product into the FP32 ``[M, N]`` tile ``acc`` in place, and return ``acc``."""
    t = current("pl.matmul_mx_acc")
    loc = user_loc()
    tacc = _tile(acc, "pl.matmul_mx_acc", "acc")
    a, sa, b, sb = _operands("pl.matmul_mx_acc", lhs, lhs_scale, rhs, rhs_scale)
    check_matmul_acc(tacc.var, a.var, b.var, loc, sa.var, sb.var)
    t.append(MatmulAcc(tacc.var, a.var, b.var, loc, a_scale=sa.var, b_scale=sb.var))
    return tacc


def matmul_mx_bias(lhs, lhs_scale, rhs, rhs_scale, bias) -> Tile:
    """Return :func:`matmul_mx`'s product plus ``bias``, an FP32 ``[1, N]`` tile added to every row.

    The bias may be in Bias (``pl.move(b, target_memory=pl.Mem.Bias)``), Vec or Mat.
    """
    current("pl.matmul_mx_bias")
    a, sa, b, sb = _operands("pl.matmul_mx_bias", lhs, lhs_scale, rhs, rhs_scale)
    bt = _tile(bias, "pl.matmul_mx_bias", "bias")
    return record(Matmul(a.var, b.var, bt.var, a_scale=sa.var, b_scale=sb.var), "pl.matmul_mx_bias")


# ---- PyPTO's MX scale layouts: pl.Tensor[[M, K/32], pl.FP8E8M0, pl.MX_A_ZZ] ---------------------------------


class MxLayout(enum.Enum):
    """The byte order of an MX scale tensor on the host (PyPTO's ``pl.MX_A_ZZ`` / ``pl.MX_B_NN``).

    ``MX_A_ZZ`` (an lhs scale ``[M, K/32]``): blocks of 16 rows x 2 scales,
    row-major over the blocks, each block row-major (16 x 2).  ``MX_B_NN``
    (an rhs scale ``[K/32, N]``): blocks of 2 scales x 16 columns, ordered by
    column block then scale block, each block stored column by column
    (16 x 2).  A whole load of such a tensor gives the logical tile.
    """

    MX_A_ZZ = "MX_A_ZZ"
    MX_B_NN = "MX_B_NN"

    def check(self, shape) -> None:
        """The annotated shape must be 2-D and tile into the layout's blocks."""
        rows, cols = (16, 2) if self is MxLayout.MX_A_ZZ else (2, 16)
        if len(shape) != 2 or not all(is_int(d) for d in shape) or shape[0] % rows or shape[1] % cols:
            raise PtoCompileError(f"pl.{self.name}: a 2-D tensor of whole {rows} x {cols} blocks, got shape "
                                  f"{list(shape)}")

    @property
    def valid_shape(self):
        """No valid box (read where a pl.TensorView's would be)."""
        return None

    def __repr__(self) -> str:
        return f"pl.{self.name}"


def mark_layouts(proxies, anns: dict) -> None:
    """Note on each tensor proxy whose annotation names an MX layout that its loads unpack it."""
    for proxy in proxies:
        ann = anns.get(getattr(proxy, "name", None))
        if isinstance(getattr(ann, "view", None), MxLayout):
            proxy.mx_layout = ann.view


def mx_unpack(tile: Tile, layout: MxLayout, loc) -> Tile:
    """The logical tile of a whole MX-layout tensor loaded as stored (its physical byte order)."""
    from ._layout import reshape, slice as tile_slice, tile_assemble, transpose
    from ._ops import full

    rows, cols = tile.shape
    blocks = reshape(tile, [rows * cols // 32, 32])  # one 16 x 2 block a row, in storage order
    out = full([rows, cols], 0.0, tile.dtype)
    if layout is MxLayout.MX_A_ZZ:
        per_row = cols // 2
        for q in range(rows // 16 * per_row):
            block = reshape(tile_slice(blocks, [1, 32], [q, 0]), [16, 2])
            out = tile_assemble(out, block, [q // per_row * 16, q % per_row * 2])
    else:
        per_col = rows // 2
        for q in range(cols // 16 * per_col):
            block = transpose(reshape(tile_slice(blocks, [1, 32], [q, 0]), [16, 2]))
            out = tile_assemble(out, block, [q % per_col * 2, q // per_col * 16])
    return out
