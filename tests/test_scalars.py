"""The scalar validators (pypto_async/_scalars.py): a bool is never an int, and the message names the argument."""

from __future__ import annotations

import numpy as np
import pytest

from pypto_async import _scalars
from pypto_async.errors import PtoArgumentError


@pytest.mark.parametrize("value, want", [(0, True), (-3, True), (2**70, True), (True, False), (False, False),
                                         (1.0, False), ("1", False), (None, False), (np.int64(3), False)])
def test_is_int(value, want):
    assert _scalars.is_int(value) is want


@pytest.mark.parametrize("value, want", [(0, True), (1.5, True), (float("inf"), True), (True, False),
                                         ("1", False), (None, False)])
def test_is_number(value, want):
    assert _scalars.is_number(value) is want


def test_check_int_returns_the_value_within_its_bounds():
    assert _scalars.check_int(5, "n") == 5
    assert _scalars.check_int(1, "n", low=1, high=1) == 1
    assert _scalars.check_int(None, "n", low=1, optional=True) is None


@pytest.mark.parametrize("value, bounds, message", [
    (True, {}, "n must be an int, not True"),
    (0, {"low": 1}, "n must be an int >= 1, not 0"),
    (9, {"high": 8}, "n must be an int <= 8, not 9"),
    (2.0, {"low": 0, "high": 4}, "n must be an int in [0, 4], not 2.0"),
    (False, {"low": 0, "optional": True}, "n must be None or an int >= 0, not False"),
    (None, {"low": 0}, "n must be an int >= 0, not None"),
])
def test_check_int_refuses_with_a_message_that_names_the_argument(value, bounds, message):
    with pytest.raises(PtoArgumentError) as ei:
        _scalars.check_int(value, "n", **bounds)
    assert str(ei.value) == message

