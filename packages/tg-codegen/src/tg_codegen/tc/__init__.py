"""Tensor cores, STAGE and Hopper's warpgroup MMA: one feature of the GPU backends, gathered here.

Two entry points: `choose.tc_optimizations(k)`, the hand-coded choice (the heuristic calls it first), applies TC
and STAGE to a matmul the renderer's tensor cores take; `lower.lower_tc(k)` lowers a kernel with TC applied
(`tg_codegen.program.lower` calls it). Each module imports only those before it (a lint-imports contract):
cores.py (the instructions a renderer offers), opts.py (the TC opt, a Kernel hook), stage.py (the STAGE opt and
the Lowerer's shared-memory tiles), lower.py (the tensor-core Lowerer), choose.py (the hand-coded choice).
"""
