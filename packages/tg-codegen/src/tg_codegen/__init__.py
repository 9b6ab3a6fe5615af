"""tg_codegen: kernel AST -> loops -> linear UOps -> source. Kernel, lowerer, linearizer, renderers.

>>> from tg_codegen import ClangRenderer, get_program  # doctest: +SKIP
"""

from tg_codegen.kernel import Kernel
from tg_codegen.linearize import linearize, reduce_identity
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_codegen.program import get_program, lower
from tg_codegen.renderer import ProgramSpec, Renderer
from tg_codegen.renderer.cstyle import ClangRenderer, CStyleLanguage

__version__ = "0.1.0"
__all__ = [
    "CStyleLanguage",
    "ClangRenderer",
    "Kernel",
    "KernelOptError",
    "Opt",
    "OptOps",
    "ProgramSpec",
    "Renderer",
    "get_program",
    "linearize",
    "lower",
    "reduce_identity",
]
