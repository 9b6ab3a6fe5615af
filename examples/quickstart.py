"""Quick start: build a lazy graph, look at its schedule, run it, and train a tiny linear model with autograd.

Run with `uv run examples/quickstart.py` (add DEBUG=2 to see every kernel, DEBUG=4 for its source).
"""

import numpy as np

from tg import Device, GlobalCounters, Tensor, nn

print(f"default device: {Device.DEFAULT}")

a = Tensor([1.0, 2.0, 3.0])
b = Tensor([4.0, 5.0, 6.0])
c = Tensor([1.0, -1.0, 2.0])
out = ((a + b) * c).relu().sum()
print(f"lazy graph root: {out.uop.op}, kernels scheduled: {len(out.schedule())}")
GlobalCounters.reset()
print(f"((a+b)*c).relu().sum() = {out.item()}  (kernels run: {GlobalCounters.kernel_count})")

x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
print("x.T =", x.T.tolist())
print("x.sum(axis=1) =", x.sum(axis=1).tolist(), " x.max() =", x.max().item())

# fit y = 2x - 1 with a Linear layer: backward() computes the gradients, SGD applies them
rng = np.random.default_rng(0)
xs = rng.uniform(-1, 1, (64, 1)).astype(np.float32)
ys = 2 * xs - 1
Tensor.manual_seed(0)
layer = nn.Linear(1, 1)
opt = nn.optim.SGD(nn.state.get_parameters(layer), lr=0.5)
with Tensor.train():
    for _ in range(200):
        opt.zero_grad()
        loss = ((layer(Tensor(xs)) - Tensor(ys)) ** 2).mean()
        loss.backward()  # fills layer.weight.grad and layer.bias.grad
        opt.step()
assert layer.bias is not None
print(f"learned w={layer.weight.item():.3f} b={layer.bias.item():.3f} (expected 2, -1), loss {loss.item():.2e}")
