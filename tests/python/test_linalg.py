"""nalgebra and faer over typed arguments (benchmarks/peers' `linalg.rs`, docs/rust.md "Linear
algebra views"): views of every layout multiplied against NumPy's `@`, nalgebra's column vectors
and fixed-size views, nalgebra results handed back without a copy, and rust-numpy's
`matrix_from_numpy` and `matrix_to_numpy` tests (tests/array.rs, tests/to_py.rs) ported."""

from __future__ import annotations

import numpy as np
import pytest

peers = pytest.importorskip("amso_peers")


def misaligned(dtype, count, offset=1):
    """A NumPy array of `count` elements 1 byte past an aligned address."""
    itemsize = np.dtype(dtype).itemsize
    buffer = bytearray(offset + count * itemsize + 64)
    base = np.frombuffer(buffer, dtype=np.uint8)
    skip = (-base.__array_interface__["data"][0]) % 64 + offset
    array = np.frombuffer(buffer, dtype=dtype, count=count, offset=skip)
    array[...] = np.arange(count)
    return array


MATRICES = {
    "c-order": lambda: np.arange(12.0).reshape(3, 4),
    "fortran": lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "fortran-columns": lambda: np.asfortranarray(np.arange(24.0).reshape(3, 8))[:, ::2],
    "strided": lambda: np.arange(48.0).reshape(6, 8)[::2, 1::2],
    "misaligned": lambda: misaligned(np.float64, 12).reshape(3, 4),
}
# Rows one element apart: the layouts nalgebra's products are sound over (nalgebra #1616).
NALGEBRA = {"fortran", "fortran-columns"}


@pytest.mark.parametrize("layout", MATRICES)
@pytest.mark.parametrize("library", ["nalgebra", "faer"])
def test_matrix_views_multiply_as_numpy_does(layout, library):
    a = MATRICES[layout]()
    b = np.asfortranarray(np.arange(8.0).reshape(4, 2) - 3.0)
    if library == "nalgebra" and layout not in NALGEBRA:
        # nalgebra 0.35's products write out of bounds over views whose row stride is not 1
        # (its issue #1616): amso hands out no such view.
        with pytest.raises(ValueError, match=r"row stride of 1 \(Fortran order.*nalgebra issue #1616"):
            peers.nalgebra_matmul(a, b)
        return
    product = getattr(peers, f"{library}_matmul")(a, b)
    np.testing.assert_allclose(product, a @ b)


def test_a_nalgebra_product_comes_back_over_its_own_buffer_in_fortran_order():
    a = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    product = peers.nalgebra_matmul(a, np.asfortranarray(np.eye(4)))
    assert product.shape == (3, 4) and product.flags.f_contiguous and product.flags.writeable
    assert not product.flags.owndata and product.base is not None  # the matrix's Vec, not a copy
    np.testing.assert_array_equal(product, a)


@pytest.mark.parametrize("length", [0, 1, 5])
def test_matrix_times_column_vector_as_numpy_does(length):
    a = np.asfortranarray(np.arange(3.0 * length).reshape(3, length) + 1.0)
    x = np.arange(float(length)) - 2.0
    y = peers.nalgebra_matvec(a, x)
    assert y.shape == (3,) and y.base is not None  # over the nalgebra vector's own buffer
    np.testing.assert_allclose(y, a @ x)
    if length:  # rust-numpy's try_as_matrix gives no view of an empty array
        np.testing.assert_allclose(peers.numpy_nalgebra_matvec(a, x), a @ x)


def test_a_strided_or_reversed_vector_is_refused():
    a = np.asfortranarray(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"row stride of 1 .*nalgebra issue #1616.*strides \[2\]"):
        peers.nalgebra_matvec(a, np.arange(6.0)[::2])
    with pytest.raises(ValueError, match=r"non-negative strides.*\[-1\]"):
        peers.nalgebra_matvec(a, np.arange(3.0)[::-1])


def test_axpy_over_column_vectors_stays_in_bounds():
    """nalgebra #1616's own call, over the views amso hands out: exact, and the memory past the
    end is untouched."""
    storage = np.zeros(8)
    x, y = storage[:5], np.arange(5.0)
    peers.nalgebra_axpy(x, y)
    np.testing.assert_array_equal(storage, [0, 1, 2, 3, 4, 0, 0, 0])
    with pytest.raises(ValueError, match="row stride of 1"):
        peers.nalgebra_axpy(np.zeros(10)[::2], y)


def test_fixed_size_views_check_their_shape():
    fortran = np.asfortranarray(np.arange(9, dtype=np.int32).reshape(3, 3))
    assert peers.nalgebra_fixed3(fortran) == (0 + 4 + 8, 36)
    with pytest.raises(ValueError, match=r"expected a 3x3 matrix .* got an array of shape \[2, 3\]"):
        peers.nalgebra_fixed3(np.asfortranarray(np.zeros((2, 3), np.int32)))
    with pytest.raises(ValueError, match="row stride of 1"):  # C order, as every view
        peers.nalgebra_fixed3(np.arange(9, dtype=np.int32).reshape(3, 3))
    x = np.array([3.0, 4.0, 12.0])
    assert peers.nalgebra_svector_double(x) == 13.0
    np.testing.assert_array_equal(x, [6.0, 8.0, 24.0])
    with pytest.raises(ValueError, match=r"expected a vector of 3 elements .* shape \[4\]"):
        peers.nalgebra_svector_double(np.zeros(4))


def test_writable_fixed_size_views_write_in_place():
    a = np.asfortranarray(np.arange(4.0).reshape(2, 2))
    peers.nalgebra_add_to_first_column(a, np.array([10.0, 20.0]))
    np.testing.assert_array_equal(a, [[10.0, 1.0], [22.0, 3.0]])
    with pytest.raises(ValueError, match=r"expected a vector of 2 elements .* shape \[3\]"):
        peers.nalgebra_add_to_first_column(a, np.zeros(3))
    with pytest.raises(ValueError, match=r"expected a 2x2 matrix .* shape \[2, 3\]"):
        peers.nalgebra_add_to_first_column(np.asfortranarray(np.zeros((2, 3))), np.zeros(2))
    np.testing.assert_array_equal(a, [[10.0, 1.0], [22.0, 3.0]])  # nothing written by the refusals


def test_matrix_to_numpy_ported():
    """rust-numpy's tests/to_py.rs `matrix_to_numpy`: the same values and shapes, except that a
    column vector (`Vector4`) comes back 1-D, as a `DVector` and NumPy's own `a @ x` do, where
    rust-numpy gives `(4, 1)`."""
    matrix, row, vector, row_vector = peers.nalgebra_matrix_to_numpy()
    np.testing.assert_array_equal(matrix, [[0, 1, 2], [3, 4, 5], [6, 7, 8]])
    assert matrix.dtype == np.int32 and matrix.flags.f_contiguous
    np.testing.assert_array_equal(row, [[0, 1, 2]])
    np.testing.assert_array_equal(vector, [-4, 1, 2, 3])
    assert vector.shape == (4,)
    np.testing.assert_array_equal(row_vector, [[23, 42]])


def test_matrix_from_numpy_ported():
    """rust-numpy's tests/array.rs `matrix_from_numpy`: a 3x3 of 0..8 viewed dynamic and fixed
    (`Matrix3`), a 1-D 0..2 as a column (`Matrix3x1`), a 3-D array and a reversed view refused,
    and wrong fixed sizes refused. amso's difference: the C-order original and `a[:, :, 0]` of a
    2x2x2 (row stride 2) are refused (nalgebra #1616), so they are taken in Fortran order here."""
    c_order = np.arange(9, dtype=np.int32).reshape(3, 3)
    with pytest.raises(ValueError, match="nalgebra issue #1616"):
        peers.nalgebra_fixed3(c_order)
    fortran = np.asfortranarray(c_order)
    assert peers.nalgebra_fixed3(fortran) == (12, 36)
    np.testing.assert_array_equal(peers.nalgebra_matmul(fortran.astype(np.float64), np.eye(3, order="F")), c_order)
    column = np.arange(3.0)
    np.testing.assert_array_equal(peers.nalgebra_matvec(np.asfortranarray(np.eye(3)), column), column)
    with pytest.raises(TypeError, match="2 dimensions|ndim|dimension"):
        peers.nalgebra_fixed3(np.zeros((2, 2, 2), np.int32))
    with pytest.raises(ValueError, match="non-negative strides"):
        peers.nalgebra_fixed3(fortran[::-1])
    with pytest.raises(ValueError, match="expected a 3x3 matrix"):
        peers.nalgebra_fixed3(np.asfortranarray(np.zeros((3, 2), np.int32)))
    with pytest.raises(ValueError, match="row stride of 1"):
        peers.nalgebra_fixed3(np.arange(8, dtype=np.int32).reshape(2, 2, 2)[:, :, 0])


def test_a_misaligned_matrix_is_refused_with_the_copy_to_make():
    """A misaligned array is viewed through its aligned copy, which is in C order: a matrix of
    more than one row is refused, and the message names the copy that works."""
    a = misaligned(np.float64, 12).reshape(3, 4, order="F")
    b = np.asfortranarray(np.eye(4))
    with pytest.raises(ValueError, match=r"aligned C-order copy: pass np\.require\(x, requirements=\"FA\"\)"):
        peers.nalgebra_matmul(a, b)
    np.testing.assert_array_equal(peers.nalgebra_matmul(np.require(a, requirements="FA"), b), a)
    np.testing.assert_array_equal(peers.nalgebra_matvec(np.asfortranarray(np.eye(2)), misaligned(np.float64, 2)), [0.0, 1.0])


def test_a_reversed_view_is_refused_by_nalgebra_and_read_by_faer():
    a, b = np.arange(12.0).reshape(3, 4)[::-1], np.eye(4)
    with pytest.raises(ValueError, match="non-negative strides"):
        peers.nalgebra_matmul(a, b)
    np.testing.assert_allclose(peers.faer_matmul(a, b), a)


@pytest.mark.parametrize("layout", MATRICES)
def test_writable_matrix_views_write_in_place(layout):
    x = MATRICES[layout]()
    reference = x * 2.0
    if layout in NALGEBRA:
        peers.nalgebra_double(x)
    else:  # refused, and left as it was (see test_matrix_views_multiply_as_numpy_does)
        reference = x.copy()
        with pytest.raises(ValueError, match="row stride of 1"):
            peers.nalgebra_double(x)
    np.testing.assert_array_equal(x, reference)
    y = MATRICES[layout]()
    reference = y + 10.0 * np.arange(3)[:, None] + np.arange(y.shape[1])[None, :]
    peers.faer_add_index(y)
    np.testing.assert_array_equal(y, reference)
