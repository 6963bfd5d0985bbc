"""pypto_async: an asynchronous, stream-based device runtime for PyPTO tile kernels.

``import pypto_async.language as pl`` to write kernels, ``pypto_async.ir`` to
compile them, ``pypto_async.runtime`` to dispatch them.  Every error is a
:class:`PtoError`.
"""

from ._dtypes import DataType
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

__version__ = "0.1.0"

__all__ = ["DataType", "__version__", *_errors_all]
