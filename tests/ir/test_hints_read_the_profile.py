"""The compile-time perf hints and the device model read one set of chip figures: the profile's."""

from __future__ import annotations

from pathlib import Path

import pytest

from pypto_async.ir._perf_hints import chip_of
from pypto_async.runtime._profile import A2A3, A5, SIM, profile_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "device_model.md"


@pytest.mark.parametrize("platform, profile", [("a2a3sim", A2A3), ("a5sim", A5), ("sim", SIM)])
def test_the_hints_figures_are_the_platforms_profile(platform, profile):
    assert profile_for(platform) is profile
    chip = chip_of(platform)
    assert chip.recommended_innermost_bytes == profile.transfer_granule_bytes
    assert chip.l2_cache_line_bytes == profile.l2_line_bytes
    capacity = {space: cap for space, (cap, _align) in chip.buffers.items()}
    assert capacity == {"Vec": profile.ub_bytes, "Mat": profile.l1_bytes, "Left": profile.l0a_bytes,
                        "Right": profile.l0b_bytes, "Acc": profile.l0c_bytes, "Bias": profile.bias_bytes}


def test_a5s_figures_are_pypto_s_a5_backend():
    # The 128 B innermost granularity PH001 recommends on a5 is the granule the model rounds rows to.
    assert A5.transfer_granule_bytes == 128 and A2A3.transfer_granule_bytes == 512
    assert (A5.ub_bytes, A5.l0c_bytes, A5.l2_line_bytes) == (240 * 1024, 256 * 1024, 512)


def test_the_doc_counts_vector_bytes_as_the_code_does():
    """ir/_work.py counts an op's elements times the widest element it reads or writes."""
    text = " ".join(DOC.read_text().split())
    assert "`vec_bytes` counts each vector operation's elements times the widest element it reads or writes" in text
    assert "the bytes of each vector operation's result" not in text
