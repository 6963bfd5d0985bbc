"""pl.tile.scatter_mask(dst, src, pattern): dst with the pattern's column of each group replaced by src's."""

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError
from helpers.ir_fixtures import poison

#: pattern -> (group size, position in the group), PyPTO's hardware masks.
CASES = {pl.tile.MaskPattern.P0010: (4, 1), pl.tile.MaskPattern.P1010: (2, 1), pl.tile.MaskPattern.P1000: (4, 3)}


@pytest.mark.parametrize("pattern", list(CASES), ids=lambda p: p.name)
def test_scatter_mask_writes_the_selected_column_of_each_group(rng, pattern):
    size, pos = CASES[pattern]
    cols = 16 // size

    @pl.jit
    def k(dst: pl.Tensor[[4, 16], pl.FP32], src: pl.Tensor[[4, cols], pl.FP32], out: pl.Out[pl.Tensor[[4, 16], pl.FP32]]):
        with pl.incore():
            t = pl.tile.scatter_mask(pl.load(dst, [0, 0], [4, 16]), pl.load(src, [0, 0], [4, cols]), pattern)
            pl.store(t, [0, 0], out)
        return out

    dst, src = rng.standard_normal((4, 16), dtype=np.float32), rng.standard_normal((4, cols), dtype=np.float32)
    out = poison((4, 16))
    k(dst, src, out)
    want = dst.copy()
    want[:, pos::size] = src
    np.testing.assert_array_equal(out, want)


def test_a_src_of_the_wrong_width_is_a_compile_error():
    @pl.jit
    def k(dst: pl.Tensor[[4, 16], pl.FP32], src: pl.Tensor[[4, 8], pl.FP32], out: pl.Out[pl.Tensor[[4, 16], pl.FP32]]):
        with pl.incore():
            t = pl.tile.scatter_mask(pl.load(dst, [0, 0], [4, 16]), pl.load(src, [0, 0], [4, 8]),
                                     pl.tile.MaskPattern.P0001)
            pl.store(t, [0, 0], out)
        return out

    with pytest.raises(PtoCompileError, match=r"a mask scatter writes a \[r, c\] input into a \[r, c \* 4\] dst"):
        k.lower(np.zeros((4, 16), np.float32), np.zeros((4, 8), np.float32), poison((4, 16)))
