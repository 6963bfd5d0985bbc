"""Every name a public module lists in ``__all__`` is there: ``from M import *`` and ``M.name`` never fail."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import pypto_async


def _public_modules():
    names = ["pypto_async"]
    for info in pkgutil.walk_packages(pypto_async.__path__, "pypto_async."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts[1:]) or parts[1] in ("torch", "ray"):
            continue  # private modules; the optional extras have tests of their own
        names.append(info.name)
    return names


@pytest.mark.parametrize("name", _public_modules())
def test_every_name_in_all_is_defined(name):
    module = importlib.import_module(name)
    missing = [n for n in getattr(module, "__all__", ()) if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ lists names it does not define: {missing}"
