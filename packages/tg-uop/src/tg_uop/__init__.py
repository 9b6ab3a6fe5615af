"""tg_uop: the IR of tg. dtypes, Ops, UOp, UPat, PatternMatcher, graph_rewrite, symbolic rules, helpers.

>>> from tg_uop import UOp, UPat, PatternMatcher, graph_rewrite, dtypes
>>> pm = PatternMatcher([(UPat.cvar("c1") + UPat.cvar("c2"), lambda c1, c2: c1.const_like(c1.arg + c2.arg))])
>>> graph_rewrite(UOp.const(dtypes.int, 1) + 2, pm).arg
3
"""

from tg_uop.dtype import ConstType, DType, PtrDType, dtypes
from tg_uop.helpers import DEBUG, Context, ContextVar, GlobalCounters, getenv, prod
from tg_uop.ops import GroupOp, Ops
from tg_uop.rewrite import PatternMatcher, UPat, graph_rewrite, map_graph, run_pass
from tg_uop.symbolic import symbolic, symbolic_simple
from tg_uop.uop import UOp, exec_alu, sint

Variable = UOp.variable

__version__ = "0.1.0"
__all__ = [
    "DEBUG",
    "ConstType",
    "Context",
    "ContextVar",
    "DType",
    "GlobalCounters",
    "GroupOp",
    "Ops",
    "PatternMatcher",
    "PtrDType",
    "UOp",
    "UPat",
    "Variable",
    "dtypes",
    "exec_alu",
    "getenv",
    "graph_rewrite",
    "map_graph",
    "run_pass",
    "prod",
    "sint",
    "symbolic",
    "symbolic_simple",
]
