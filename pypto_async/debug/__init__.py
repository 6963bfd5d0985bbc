"""Debugging aids (PyPTO's ``pypto.debug``): a PyTorch reference generated from a kernel's IR.

``torch_codegen(kernel.lower(*args))`` returns Python source defining a
function of the kernel's parameters that computes the same result with
torch on the CPU (see :mod:`._torch_codegen`); execute it and compare.
"""

from ._torch_codegen import torch_codegen

__all__ = ["torch_codegen"]
