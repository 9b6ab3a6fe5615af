"""Which tensor operation, called from which line of the user's code, made each lazy node (recorded only while
VIZ records), and so which operations each kernel fuses.

>>> from tg_uop import UOp, dtypes
>>> x = UOp.const(dtypes.float, 1.0) + 2.0
>>> def my_step():  # user code (this module's own frames would count as tg's)
...     note_origin(x)
>>> exec("my_step()", {"my_step": my_step, "__name__": "user"})
>>> made_by(x, lambda u: False)
['my_step @ <string>:1']
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from tg_tensor.engine.realizer import current
from tg_uop import Ops, UOp

OURS = ("tg", "tg_uop", "tg_shape", "tg_codegen", "tg_runtime", "tg_tensor", "tg_nn", "tg_llm", "tg_viz")
LIBRARY = ("contextlib", "threading", "functools", "runpy", "importlib", "unittest", "_pytest", "pluggy", "pytest")


def note_origin(u: UOp) -> None:
    """Remember the outermost tg function on the stack (the operation the user called: `Tensor.conv2d`,
    `Conv2d.__call__`, `Tensor.backward`) and the user's line that called it, as the maker of `u`."""
    made = current().origins
    if u in made:
        return
    op, line = "", ""
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if module in OURS:
            op = _op_name(frame.f_code.co_qualname)
        elif module not in LIBRARY and op:
            line = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
            break
        frame = frame.f_back  # type: ignore[assignment]
    if op:
        made[u] = f"{op} @ {line}" if line else op


def _op_name(qualname: str) -> str:
    """`Tensor.__init__` -> `Tensor`, `NNMixin.dropout` -> `dropout`, `Conv2d.__call__` -> `Conv2d`."""
    owner, _, name = qualname.rpartition(".")
    if name == "__init__" and owner == "Tensor" or name == "__call__":
        return owner
    return name if owner.endswith("Mixin") or owner == "Tensor" else qualname


def made_by(node: UOp, computed: Callable[[UOp], bool], limit: int = 12) -> list[str]:
    """The operations (with their user lines) that made `node` and the nodes under it down to buffers and nodes
    `computed` says other kernels made: what one kernel fuses, sources first."""
    made, seen, found = current().origins, set[UOp](), list[str]()
    stack = [node]
    while stack and len(seen) < 20_000:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if (what := made.get(u)) is not None and what not in found:
            found.append(what)
        stack.extend(s for s in u.src if s.op is not Ops.BUFFER and not computed(s))
    return found[::-1][:limit]
