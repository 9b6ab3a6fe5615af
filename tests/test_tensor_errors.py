"""Bad input: one test per case, each checking that the message names the shapes or values involved."""

from __future__ import annotations

import pytest

from tg import Tensor


def test_incompatible_broadcast() -> None:
    with pytest.raises(ValueError, match=r"shapes \(2, 3\) and \(4,\) cannot be broadcast together"):
        Tensor.ones(2, 3) * Tensor.ones(4)


def test_matmul_inner_dimension_mismatch() -> None:
    with pytest.raises(ValueError, match=r"matmul: shapes \(3, 4\) and \(5, 6\) do not align: 4 != 5"):
        Tensor.ones(3, 4) @ Tensor.ones(5, 6)


def test_invalid_axis() -> None:
    with pytest.raises(IndexError, match=r"axis 3 is out of range for a tensor of 2 dims"):
        Tensor.ones(2, 3).sum(axis=3)


def test_constant_index_out_of_range() -> None:
    with pytest.raises(IndexError, match=r"index 4 is out of bounds for dim 0 of size 3 \(shape \(3, 2\)\)"):
        Tensor.ones(3, 2)[4]


def test_too_many_indices() -> None:
    with pytest.raises(IndexError, match=r"too many indices: 3 for a tensor of 2 dims"):
        Tensor.ones(3, 2)[0, 1, 0]


def test_cat_of_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match=r"cat: shapes \[\(2, 3\), \(3, 2\)\] do not match outside dim 0"):
        Tensor.ones(2, 3).cat(Tensor.ones(3, 2))


def test_backward_of_non_scalar_without_gradient() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match=r"non-scalar tensor \(shape \(2,\)\) needs an explicit gradient"):
        (x * 2).backward()


def test_gradient_with_respect_to_a_tensor_outside_the_graph() -> None:
    x, y = Tensor([1.0], requires_grad=True), Tensor([2.0], requires_grad=True)
    assert (x * 3).sum().gradient(y)[0].tolist() == [0.0]  # tinygrad: a zero gradient, not an error
    with pytest.raises(RuntimeError, match=r"only float tensors have gradients, got <Tensor .* dtype=dtypes.int"):
        (x * 3).sum().gradient(Tensor([1]))


def test_op_a_dtype_does_not_support() -> None:
    with pytest.raises(TypeError, match=r"bitwise_xor needs an integer or bool tensor, got dtype dtypes.float"):
        Tensor([1.5]) ^ Tensor([2.5])


@pytest.mark.parametrize("data", [[1, 2], [True, False]])
def test_integer_tensors_cannot_require_gradients(data: list[int] | list[bool]) -> None:
    """As in PyTorch: an integer or bool tensor refuses requires_grad (its .grad stayed None after backward)."""
    with pytest.raises(RuntimeError, match=r"only floating point tensors can require gradients, got dtype"):
        Tensor(data, requires_grad=True)
    with pytest.raises(TypeError, match=r"only floating point tensors can require gradients"):
        Tensor(data).requires_grad_()
    assert Tensor(data, requires_grad=False).requires_grad is False
    assert Tensor([1.0, 2.0], requires_grad=True).requires_grad is True
