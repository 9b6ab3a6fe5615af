"""Tensor cores, STAGE and Hopper's warpgroup MMA: one feature of the GPU backends, gathered here.

Two entry points, one per phase of codegen:
  - `choose.tc_optimizations(k)`: the hand-coded choice, which applies TC (and STAGE) to a matmul kernel where
    the renderer has tensor cores that take it (the heuristic calls it first);
  - `lower.lower_tc(k)`: lowers a kernel with TC applied (`tg_codegen.program.lower` calls it).

The modules, each importing only those before it (no import circle; the Kernel and the Lowerer see the first three
as the hooks of `Opt(OptOps.TC)` and `Opt(OptOps.STAGE)`):
  - cores.py: the instructions a renderer offers (`TensorCore` tables, which the CUDA renderer lists);
  - opts.py: the TC opt: matching a matmul and splitting its axes by the tile;
  - stage.py: the STAGE opt: operand tiles in shared memory (pipelined, ldmatrix, wgmma descriptors);
  - lower.py: the tensor-core Lowerer (lanes, fragments, MMA chains);
  - choose.py: the hand-coded choice.

>>> from tg_codegen.tc.cores import TENSOR_CORES_SM90
>>> [tc.threads for tc in TENSOR_CORES_SM90 if tc.wgmma]
[128, 128, 128]
"""
