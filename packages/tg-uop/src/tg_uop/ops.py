"""The op set of the IR, grouped for rewrite rules.

>>> from tg_uop.ops import Ops, GroupOp
>>> Ops.ADD in GroupOp.Binary and Ops.ADD in GroupOp.Commutative
True
"""

from __future__ import annotations

from enum import Enum, auto


class Ops(Enum):
    """Every operation a UOp can be. Tensor graphs, kernel ASTs and lowered programs share this set."""

    # graph structure and memory
    SINK = auto()
    NOOP = auto()
    DEVICE = auto()
    BUFFER = auto()
    CONST = auto()
    ARANGE = auto()  # the ints 0..n-1 as a leaf (tensor level: src DEVICE, arg n; kernel AST: src VIEW)
    VIEW = auto()
    COPY = auto()
    ASSIGN = auto()
    CONTIGUOUS = auto()
    DETACH = auto()
    KERNEL = auto()
    DEFINE_VAR = auto()
    BIND = auto()
    MULTI = auto()  # a tensor on several devices: src = (*per-device shards, DEVICE(device set)), arg = sharded axis
    COLLECTIVE = auto()  # one device's result of a collective: src = (*inputs, DEVICE(d)), arg = (kind, op, size)

    # movement ops (tensor level; the scheduler turns them into VIEWs)
    RESHAPE = auto()
    PERMUTE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    FLIP = auto()

    # reductions
    REDUCE_AXIS = auto()  # tensor/kernel level: arg = (alu op, axes)
    REDUCE = auto()  # lowered: src = (value, *ranges), arg = alu op

    # lowered program
    DEFINE_GLOBAL = auto()
    DEFINE_LOCAL = auto()
    DEFINE_ACC = auto()
    INDEX = auto()
    LOAD = auto()
    STORE = auto()
    RANGE = auto()
    ENDRANGE = auto()
    SPECIAL = auto()
    IF = auto()
    ENDIF = auto()
    BARRIER = auto()
    VECTORIZE = auto()
    GEP = auto()
    WMMA = auto()
    CUSTOM = auto()

    # ALU: unary
    CAST = auto()
    BITCAST = auto()
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIP = auto()
    NEG = auto()
    TRUNC = auto()

    # ALU: binary
    ADD = auto()
    SUB = auto()
    MUL = auto()
    FDIV = auto()
    IDIV = auto()
    MOD = auto()
    MAX = auto()
    CMPLT = auto()
    CMPNE = auto()
    XOR = auto()
    OR = auto()
    AND = auto()
    SHL = auto()
    SHR = auto()

    # ALU: ternary
    WHERE = auto()
    MULACC = auto()

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    # members are singletons: hash by identity (Enum's default hashes the name in Python, on every dict lookup)
    __hash__ = object.__hash__


class GroupOp:
    """Sets of ops that rewrite rules match on."""

    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC})
    Binary = frozenset(
        {
            Ops.ADD,
            Ops.SUB,
            Ops.MUL,
            Ops.FDIV,
            Ops.IDIV,
            Ops.MOD,
            Ops.MAX,
            Ops.CMPLT,
            Ops.CMPNE,
            Ops.XOR,
            Ops.OR,
            Ops.AND,
            Ops.SHL,
            Ops.SHR,
        }
    )
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.XOR, Ops.AND, Ops.OR})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE})
    # ops for which f(0, ..., 0) == 0: a padded (masked) view may be pushed through them
    PadSafe = frozenset(
        {
            Ops.ADD,
            Ops.SUB,
            Ops.MUL,
            Ops.MAX,
            Ops.CMPLT,
            Ops.CMPNE,
            Ops.XOR,
            Ops.OR,
            Ops.AND,
            Ops.SHL,
            Ops.SHR,
            Ops.WHERE,
            Ops.MULACC,
            Ops.NEG,
            Ops.SQRT,
            Ops.SIN,
            Ops.TRUNC,
            Ops.CAST,
            Ops.BITCAST,
        }
    )
