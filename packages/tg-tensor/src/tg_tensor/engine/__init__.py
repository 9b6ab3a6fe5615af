"""tg_tensor's engine: realizing graphs of UOps into buffers. It works on UOps and runtime Buffers only and never
imports the front end (Tensor, its op mixins, autograd, RNG, TinyJit); a tensor reaches it as a `realizer.Holder`.

From the bottom up (no import circle among them; tests/test_import_circles.py):
  - util, symbolic, source, split_reduce, live, collective: helpers with no tg_tensor import (shapes and dtypes,
    bound variables, custom kernel sources, split reductions, the index of live tensors, collectives on the host);
  - realizer: the Realizer, owner of realization state, with `schedule`, `run` and `run_schedule`;
  - provenance, siblings, lift_consts, fusion_cost: what the scheduler reads (operation names for the views,
    sibling kernels, constants lifted into buffers, the fusion cost rule);
  - schedule: the graph cut into kernels; inplace, ordering: protecting overwritten values, ordering the items;
  - multi: lowering graphs on several devices to one graph per device.
The front end (tensor.py) hands the Realizer these scheduling steps as `Realizer.stages`.
"""
