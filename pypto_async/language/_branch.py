"""Rewrite a kernel's ``if`` statements so that one on a runtime scalar traces both branches.

Tracing runs the kernel's Python once, so ``if c:`` on a value unknown at
trace time cannot pick a branch.  Before a kernel is traced, each of its
``if`` statements (``elif`` chains included) is rewritten as::

    _b = __pl_if__(c, locals())
    if _b.static:                 # c is a Python value: the original statement
        if _b.value: <then> else: <else>
    else:                         # c is a runtime index: trace both branches
        _b.then(); <then>
        (n1, ...) = _b.otherwise(("n1", ...), locals()); <else>
        (n1, ...) = _b.merge(("n1", ...), locals())

where ``n1, ...`` are the names either branch binds.

A ``return`` inside an ``if`` is PyPTO's early return: the branch's value is
the function's, and what follows the ``if`` runs only when the branch does
not return.  Before the rewrite above, the statements after such an ``if``
are moved into the branches that fall through to them, and each ``return``
so left at the end of a branch becomes ``__pl_result = value`` (the function
then ends ``return __pl_result``), so that an ``if`` on a runtime scalar
traces both branches and merges the result as any other name.  A ``return``
inside a loop in a runtime ``if`` stays refused.  A kernel whose source
is not available (built by ``exec``), that has no ``if``, or that declares
a ``nonlocal``, is traced as it is; so are the plain Python functions a
kernel calls (their ``if`` statements stay Python's).  Line numbers are kept, so errors point at the user's lines.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types

from ..ir._nodes import COMPARE_OPS, IBin
from ._runtime_scalars import loop_carry, runtime_if
from ._tracer import Index

__all__ = ["traced_fn"]

_HELPER = "__pl_if__"
_RESULT = "__pl_result"  # what an early-returning function returns, bound in its branches (merged as a name)
_cache: dict = {}


def _bound_names(stmts) -> list[str]:
    """Names a list of statements binds (not inside nested functions or classes), in first-bound order."""
    out: list[str] = []

    class V(ast.NodeVisitor):
        def visit_Name(self, node):
            helper = node.id.startswith("__pl_") and node.id != _RESULT
            if isinstance(node.ctx, ast.Store) and node.id not in out and not helper:
                out.append(node.id)

        def visit_FunctionDef(self, node):
            if node.name not in out:
                out.append(node.name)

        visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

        def visit_Lambda(self, node):
            pass

    for s in stmts:
        V().visit(s)
    return out


def _escapes(stmts) -> str | None:
    """The first ``return``/``break``/``continue``/``yield`` of the branch itself, if any."""

    class V(ast.NodeVisitor):
        found = None

        def generic_visit(self, node):
            if self.found is None:
                super().generic_visit(node)

        def visit_Return(self, node):
            self.found = self.found or "return"

        def visit_Break(self, node):
            self.found = self.found or "break"

        def visit_Continue(self, node):
            self.found = self.found or "continue"

        def visit_Yield(self, node):
            self.found = self.found or "yield"

        def visit_FunctionDef(self, node):
            pass

        visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef

        def visit_For(self, node):  # a break or continue inside an inner loop belongs to that loop
            saved = self.found
            for s in node.body + node.orelse:
                self.visit(s)
            if self.found in ("break", "continue") and saved is None:
                self.found = None
            self.visit(node.iter)

        visit_While = visit_For

    v = V()
    for s in stmts:
        v.visit(s)
    return v.found


_LOOP = "__pl_loop__"
_BOOL = "__pl_bool__"


def _truth(v):
    """``v`` as an index of value 1 or 0 when it is known only at run time (an index, an integer scalar); else None."""
    from ._tracer import ScalarArg

    if isinstance(v, ScalarArg) and not v.dtype.is_float:
        v = v != 0
    if not isinstance(v, Index):
        return None
    e = v.expr
    return v if isinstance(e, IBin) and e.op in COMPARE_OPS else v != 0


def bool_op(op: str, first, *rest):
    """``and`` / ``or`` / ``not`` in an ``if`` condition (PyPTO's): Python's on Python values, else an index.

    ``rest`` are the later operands as functions, called only when Python
    would evaluate them (``x is not None and x > 0`` keeps short-circuiting).
    An operand known only at run time (a loop index's comparison, an integer
    scalar) makes the result an index of value 1 or 0: ``and`` the product of
    the truth values, ``or`` their sum compared with 0, ``not`` the value
    compared with 0.
    """
    if op == "not":
        r = _truth(first)
        return (not first) if r is None else r == 0
    acc = first
    for operand in rest:
        ta = _truth(acc)
        if ta is None:
            if (op == "and" and not acc) or (op == "or" and acc):
                return acc
            acc = operand()
            continue
        b = operand()
        tb = _truth(b)
        if tb is None:  # a Python value: it decides or drops out
            if op == "and":
                acc = ta if b else b
            else:
                acc = b if b else ta
            continue
        acc = ta * tb if op == "and" else (ta + tb) > 0
    return acc


class _BoolOps(ast.NodeTransformer):
    """An ``if`` condition's ``and`` / ``or`` / ``not`` as :func:`bool_op` calls (they are Python's on values)."""

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        loc = {"lineno": node.lineno, "col_offset": node.col_offset}
        op = "and" if isinstance(node.op, ast.And) else "or"
        later = [ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                            body=v, **loc) for v in node.values[1:]]
        return ast.Call(func=ast.Name(id=_BOOL, ctx=ast.Load(), **loc),
                        args=[ast.Constant(value=op, **loc), node.values[0], *later], keywords=[], **loc)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        loc = {"lineno": node.lineno, "col_offset": node.col_offset}
        return ast.Call(func=ast.Name(id=_BOOL, ctx=ast.Load(), **loc),
                        args=[ast.Constant(value="not", **loc), node.operand], keywords=[], **loc)

    def visit_Lambda(self, node):
        return node  # a function's own body is not the condition


def _carried(node: ast.For) -> list[str]:
    """Names a loop's body reads before it assigns them, and assigns: each iteration reads the one before's."""
    read_first: list[str] = []
    stored: set[str] = set()

    class V(ast.NodeVisitor):
        def visit_Name(self, n):
            if n.id.startswith("__pl_"):
                return
            if isinstance(n.ctx, ast.Load):
                if n.id not in stored and n.id not in read_first:
                    read_first.append(n.id)
            else:
                stored.add(n.id)

        def visit_Assign(self, n):
            self.visit(n.value)
            for t in n.targets:
                self.visit(t)

        def visit_AnnAssign(self, n):
            if n.value is not None:
                self.visit(n.value)
            self.visit(n.target)

        def visit_AugAssign(self, n):
            if isinstance(n.target, ast.Name) and n.target.id not in stored and n.target.id not in read_first:
                read_first.append(n.target.id)
            self.visit(n.value)
            self.visit(n.target)

        def visit_FunctionDef(self, n):
            pass

        visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef

    targets = {x.id for x in ast.walk(node.target) if isinstance(x, ast.Name)}
    for st in node.body:
        V().visit(st)
    return [n for n in read_first if n in stored and n not in targets]


def _returns(node) -> bool:
    """Whether ``node`` holds a ``return`` of the function itself (not of a nested function)."""
    if isinstance(node, ast.Return):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return False
    return any(_returns(c) for c in ast.iter_child_nodes(node))


def _continue_into(stmts: list, cont: list) -> list:
    """``stmts`` then ``cont``, with ``cont`` moved into the branches of an ``if`` that returns in one of them.

    The result runs as the two lists in sequence do, and each ``return``
    not inside a loop or ``with`` ends its path: nothing follows it but
    the end of the function (a continuation both branches fall through to
    is copied into both).
    """
    for k, s in enumerate(stmts):
        if isinstance(s, ast.Return):
            return stmts[:k + 1]  # what follows is never run
        if isinstance(s, ast.If) and _returns(s):
            rest = stmts[k + 1:] + cont
            s.body = _continue_into(s.body, copy.deepcopy(rest))
            s.orelse = _continue_into(s.orelse, copy.deepcopy(rest))
            return stmts[:k + 1]
    return stmts + cont


def _continues(stmts) -> bool:
    """Whether ``stmts`` hold a ``continue`` of the loop they are in (not of a nested loop or function)."""

    class V(ast.NodeVisitor):
        found = False

        def visit_Continue(self, node):
            self.found = True

        def visit_For(self, node):
            self.visit(node.iter)  # a continue in the nested loop's body is that loop's

        def visit_While(self, node):
            pass

        def visit_FunctionDef(self, node):
            pass

        visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef

    v = V()
    for st in stmts:
        v.visit(st)
    return v.found


def _lower_continue(stmts: list, loc: dict) -> list:
    """A loop body with the same paths and no ``continue``: what follows an ``if`` that continues moves into
    its branches (``if c: continue`` then ``rest`` becomes ``if c: pass else: rest``), so a condition known
    only at run time needs no jump (both branches of such an ``if`` are traced)."""
    for k, st in enumerate(stmts):
        if isinstance(st, ast.Continue):
            return stmts[:k] or [ast.Pass(**loc)]
        if isinstance(st, ast.If) and _continues([st]):
            rest = stmts[k + 1:]
            st.body = _lower_continue(st.body + copy.deepcopy(rest), loc) or [ast.Pass(**loc)]
            st.orelse = _lower_continue(st.orelse + copy.deepcopy(rest), loc)
            return stmts[:k + 1]
    return stmts


def _bind_result(stmts: list, loc: dict) -> list:
    """Turn the ``return`` ending each path of ``stmts`` into ``__pl_result = value`` (None where none returns)."""
    last = stmts[-1] if stmts else None
    if isinstance(last, ast.Return):
        value = last.value if last.value is not None else ast.Constant(value=None, **loc)
        bind = ast.Assign(targets=[ast.Name(id=_RESULT, ctx=ast.Store(), **loc)], value=value,
                          lineno=last.lineno, col_offset=last.col_offset)
        return stmts[:-1] + [bind]
    if isinstance(last, ast.If) and _returns(last):
        last.body = _bind_result(last.body, loc)
        last.orelse = _bind_result(last.orelse, loc)
        return stmts
    return stmts + [ast.Assign(targets=[ast.Name(id=_RESULT, ctx=ast.Store(), **loc)],
                               value=ast.Constant(value=None, **loc), **loc)]


def _early_returns(fdef: ast.FunctionDef) -> None:
    """Give ``fdef`` one ``return`` at its end when an ``if`` of its body returns (see the module)."""
    body = fdef.body
    if not any(isinstance(s, ast.If) and _returns(s) for s in body):
        return
    body = _continue_into(body, [])
    last = body[-1]
    loc = {"lineno": last.lineno, "col_offset": last.col_offset}
    fdef.body = _bind_result(body, loc) + [ast.Return(value=ast.Name(id=_RESULT, ctx=ast.Load(), **loc), **loc)]


class _Rewrite(ast.NodeTransformer):
    def __init__(self):
        self.n = 0

    def visit_For(self, node: ast.For):
        """A ``pl.range`` loop whose body carries a scalar: the helper gives it one variable for all iterations.

        Its ``continue`` statements under an ``if`` are lowered first (see :func:`_lower_continue`).
        """
        it = node.iter
        is_pl = isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("range", "parallel")
        if is_pl and not node.orelse and _continues(node.body):
            node.body = _lower_continue(node.body, {"lineno": node.lineno, "col_offset": node.col_offset})
        self.generic_visit(node)
        if not is_pl:
            return node
        names = _carried(node)
        if not names or node.orelse:
            return node
        self.n += 1
        k = f"__pl_k{self.n}"
        loc = {"lineno": node.lineno, "col_offset": node.col_offset}

        def name(id_, ctx=ast.Load):
            return ast.Name(id=id_, ctx=ctx(), **loc)

        def call(fn, *args):
            return ast.Call(func=fn, args=list(args), keywords=[], **loc)

        def method(m, *args):
            return call(ast.Attribute(value=name(k), attr=m, ctx=ast.Load(), **loc), *args)

        tup = ast.Tuple(elts=[ast.Constant(value=n, **loc) for n in names], ctx=ast.Load(), **loc)

        def rebind(value):
            return ast.Assign(targets=[ast.Tuple(elts=[name(n, ast.Store) for n in names], ctx=ast.Store(), **loc)],
                              value=value, **loc)

        locals_ = call(name("locals"))
        setup = ast.Assign(targets=[name(k, ast.Store)], value=call(name(_LOOP), tup, locals_), **loc)
        node.body = [*node.body, rebind(method("next", call(name("locals"))))]
        return [setup, rebind(method("enter")), node, rebind(method("exit", call(name("locals"))))]

    def visit_If(self, node: ast.If):
        self.generic_visit(node)
        if any(isinstance(n, ast.BoolOp) or isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not)
               for n in ast.walk(node.test)):
            node.test = _BoolOps().visit(node.test)
        self.n += 1
        b = f"__pl_b{self.n}"
        loc = {"lineno": node.lineno, "col_offset": node.col_offset}

        def name(id_, ctx=ast.Load):
            return ast.Name(id=id_, ctx=ctx(), **loc)

        def call(method, *args):
            return ast.Call(func=ast.Attribute(value=name(b), attr=method, ctx=ast.Load(), **loc),
                            args=list(args), keywords=[], **loc)

        def locals_():
            return ast.Call(func=name("locals"), args=[], keywords=[], **loc)

        setup = ast.Assign(targets=[name(b, ast.Store)],
                           value=ast.Call(func=name(_HELPER), args=[node.test, locals_()], keywords=[], **loc),
                           **loc)
        static = ast.If(test=ast.Attribute(value=name(b), attr="value", ctx=ast.Load(), **loc),
                        body=node.body, orelse=node.orelse, **loc)
        escape = _escapes(node.body) or _escapes(node.orelse)
        if escape is not None:
            dynamic = [ast.Expr(value=call("refuse", ast.Constant(value=escape, **loc)), **loc)]
        else:
            names = _bound_names(node.body + node.orelse)
            tup = ast.Tuple(elts=[ast.Constant(value=n, **loc) for n in names], ctx=ast.Load(), **loc)

            def rebind(method):
                value = call(method, tup, locals_())
                if not names:
                    return ast.Expr(value=value, **loc)
                target = ast.Tuple(elts=[name(n, ast.Store) for n in names], ctx=ast.Store(), **loc)
                return ast.Assign(targets=[target], value=value, **loc)

            dynamic = [ast.Expr(value=call("then"), **loc), *node.body, rebind("otherwise"),
                       *(node.orelse or [ast.Pass(**loc)]), rebind("merge")]
        choose = ast.If(test=ast.Attribute(value=name(b), attr="static", ctx=ast.Load(), **loc),
                        body=[static], orelse=dynamic, **loc)
        return [setup, choose]


def _rewrite(fn):
    if not isinstance(fn, types.FunctionType):
        return fn
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return fn
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) != 1 or defs[0].name != fn.__name__:
        return fn
    fdef = defs[0]
    nodes = list(ast.walk(fdef))
    if not any(isinstance(n, (ast.If, ast.For)) for n in nodes):
        return fn
    if any(isinstance(n, (ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await)) for n in nodes):
        return fn  # rebuilt, a nonlocal would bind a copy of the cell; generators are not kernels
    fdef.decorator_list = []
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    _early_returns(fdef)
    _Rewrite().visit(fdef)
    free = fn.__code__.co_freevars
    maker = ast.FunctionDef(
        name="__pl_make__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in (_HELPER, _LOOP, _BOOL, *free)], kwonlyargs=[],
                           kw_defaults=[], defaults=[]),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))],
        decorator_list=[], lineno=fdef.lineno, col_offset=0, end_lineno=fdef.end_lineno, end_col_offset=0)
    module = ast.fix_missing_locations(ast.Module(body=[maker], type_ignores=[]))
    try:
        code = compile(module, fn.__code__.co_filename, "exec")
        cells = [c.cell_contents for c in (fn.__closure__ or ())]
    except (SyntaxError, ValueError):  # a syntax the rewrite cannot keep, or an empty closure cell
        return fn
    namespace: dict = {}
    exec(code, fn.__globals__, namespace)  # noqa: S102 - the kernel's own source, rewritten
    new = namespace["__pl_make__"](runtime_if, loop_carry, bool_op, *cells)
    new.__defaults__ = fn.__defaults__
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__annotations__ = fn.__annotations__
    return new


def traced_fn(fn):
    """The function to trace for ``fn``: its ``if`` statements rewritten (cached), or ``fn`` itself."""
    hit = _cache.get(fn)
    if hit is None:
        hit = _cache[fn] = _rewrite(fn)
    return hit
