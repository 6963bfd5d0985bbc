"""``register(kernel, "ns::name")``: a ``@pl.jit`` kernel as a torch custom operator.

Each registration defines two operators in a ``torch.library`` fragment of
the namespace:

* ``ns::_pypto_<name>_mutate``: the kernel itself, mutating its ``Out`` and
  ``InOut`` tensors (``Tensor(a!)`` in the schema) and returning nothing.
  Its CPU kernel runs the compiled kernel on the simulator through the
  runtime's dispatch (the worker opened around the call, else the default
  worker); its fake kernel checks the arguments and does nothing, so fake
  and meta tensors trace through it.
* ``ns::<name>``: what callers use, ``CompositeImplicitAutograd``: it checks
  the arguments, calls the mutating operator and returns the ``Out`` /
  ``InOut`` tensors the kernel returns (aliases of the arguments).  Under
  ``torch.compile`` it decomposes into the mutating operator, which
  functionalization handles as any mutable custom operator; an operator that
  returned aliases of its inputs directly could not be functionalized.

CPU tensors reach the kernel as they are: the runtime reads their memory in
place (``data_ptr``), with no conversion copy; the only copies are the
launch's own, into and out of device memory, by direction.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from ..errors import PtoArgumentError, PtoNotSupported
from ._signature import OpSignature, check_identifier, signature_of

__all__ = ["register", "registered"]

_lock = threading.Lock()


@dataclass(frozen=True)
class _Registration:
    kernel: object
    config: object
    library: object
    op: object
    mutate: object
    signature: OpSignature


#: name -> its registration, for the process lifetime (the libraries are never destroyed).
_registrations: dict[str, _Registration] = {}


def registered(name: str) -> _Registration | None:
    """The registration of ``"ns::name"``, or None."""
    return _registrations.get(name)


def _run(kernel, config, args) -> None:
    """Compile (cached per signature) and run the kernel on these CPU tensors, to completion."""
    from ..runtime._entry import dispatch
    from ..runtime._launch import Launch

    compiled = kernel.compile(*args) if config is None else kernel.compile(*args, config=config)
    result = dispatch(compiled, args)
    if isinstance(result, Launch):  # an async-mode worker: a torch operator returns once it has run
        result.sync()


def register(kernel, name: str, *, constexpr: dict | None = None, config=None):
    """Register a fully annotated ``@pl.jit`` kernel as the torch operator ``name`` (``"ns::op"``).

    Every tensor parameter needs its shape (ints, or ``pl.dynamic``
    dimensions) and dtype in its annotation, and every scalar its dtype:
    the operator's schema comes from them, before any call.  The operator
    takes every argument, ``Out`` tensors included (it writes them in
    place), and returns the ``Out``/``InOut`` tensors the kernel returns.
    Registering the same kernel under the same name again returns the same
    operator.  Registration compiles nothing and needs no :func:`init`.

    Parameters
    ----------
    kernel : JitFunction
        The ``@pl.jit`` kernel.
    name : str
        ``"namespace::operator"``, plain identifiers; operator names
        starting with ``_pypto_`` are reserved.
    constexpr : dict, optional
        PyPTO's constexpr bindings; kernels here have no constexpr
        parameters, so only ``None`` or ``{}`` is accepted.
    config : RunConfig, optional
        Compile-side options (``RunConfig.compile_kwargs``), part of the
        operator's identity.  Where it runs comes from :func:`init`, never
        from registration.

    Returns
    -------
    torch._ops.OpOverload
        ``torch.ops.<namespace>.<operator>.default``.

    Raises
    ------
    PtoArgumentError
        For a kernel that is not ``@pl.jit``, a bad name, a name registered
        already with another kernel or config (or defined by someone else),
        or an annotation the schema cannot express.
    PtoNotSupported
        For constexpr bindings, or a kernel returning tensors it allocates.
    """
    from ..language._jit import JitFunction
    from ..runtime._config import RunConfig

    if not isinstance(kernel, JitFunction):
        raise PtoArgumentError(f"pypto_async.torch.register takes a @pl.jit kernel, not {type(kernel).__name__}")
    if not isinstance(name, str) or name.count("::") != 1:
        raise PtoArgumentError(f"pypto_async.torch.register: the name must be 'namespace::operator', not {name!r}")
    namespace, operator = name.split("::")
    check_identifier(namespace, "the operator's namespace")
    check_identifier(operator, "the operator's name")
    if operator.startswith("_pypto_"):
        raise PtoArgumentError(f"operator names starting with '_pypto_' are reserved, not {operator!r}")
    if constexpr:
        raise PtoNotSupported("pypto_async.torch.register: @pl.jit kernels here have no constexpr parameters "
                              f"(got bindings for {sorted(constexpr)})")
    if config is not None and not isinstance(config, RunConfig):
        raise PtoArgumentError(f"pypto_async.torch.register: config must be a RunConfig, not {type(config).__name__}")
    with _lock:
        existing = _registrations.get(name)
        if existing is not None:
            if existing.kernel is kernel and existing.config == config:
                return existing.op
            raise PtoArgumentError(f"torch operator {name!r} is registered already with another kernel or config")
        mutate_name = f"_pypto_{operator}_mutate"
        defined = {n.partition(".")[0] for n in torch._C._dispatch_get_all_op_names()}  # without overload names
        for qual in (name, f"{namespace}::{mutate_name}"):
            if qual in defined:
                raise PtoArgumentError(f"torch operator {qual!r} is defined already (not by this registration)")
        sig = signature_of(kernel, f"torch operator {name!r} ({kernel.__name__})")
        library = torch.library.Library(namespace, "FRAGMENT")
        try:
            library.define(sig.schema(mutate_name, returns=False))

            def run(*args):
                sig.check(args, real=True)
                _run(kernel, config, args)

            def fake(*args):
                sig.check(args, real=False)

            library.impl(mutate_name, run, "CPU")
            torch.library.register_fake(f"{namespace}::{mutate_name}", fake, lib=library)
            mutate = getattr(getattr(torch.ops, namespace), mutate_name).default

            def call(*args):
                sig.check(args, real=False)
                mutate(*args)
                return sig.result(args)

            library.define(sig.schema(operator, returns=True))
            library.impl(operator, call, "CompositeImplicitAutograd")
            op = getattr(getattr(torch.ops, namespace), operator).default
        except BaseException:
            library._destroy()
            raise
        _registrations[name] = _Registration(kernel, config, library, op, mutate, sig)
        return op
