//! Casting an argument, as rust-numpy's `cast_array` does: its elements converted by NumPy's own
//! casts into a new array (`astype`), by one of NumPy's casting rules, unsafe by default
//! (`300` becomes `44` in uint8, a float's fraction is dropped). The result is a typed argument
//! over the new NumPy array, read as any other.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::element::ArrayElement;
use crate::python::args::{Access, ArgumentError, Dimensions, Read, TypedArray};
use crate::python::npyffi;

/// NumPy's casting rules (`numpy.can_cast`, `astype(casting=...)`), in NumPy's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Casting {
    /// Only the same dtype.
    No,
    /// The same dtype, in any byte order.
    Equiv,
    /// Casts that keep every value (int32 to float64, not int64 to float32).
    Safe,
    /// Safe casts, and casts within a kind (float64 to float32, int64 to int8).
    SameKind,
    /// Any cast, as C converts: `astype`'s default and rust-numpy's `cast_array`.
    Unsafe,
}

impl<'py, T: ArrayElement, D: Dimensions, A: Access> TypedArray<'py, T, D, A> {
    /// The elements as `U`s, in a new C-order NumPy array, converted as NumPy's
    /// `x.astype(U)` converts them (unsafe casting, as rust-numpy's `cast_array`). Host data
    /// only: device data is a `ValueError` naming its framework's cast. Vector element types
    /// (`float32x4`) are a `TypeError`: cast the array of their lanes.
    pub fn cast<U: ArrayElement>(&self) -> PyResult<TypedArray<'py, U, D, Read>> {
        self.cast_with(Casting::Unsafe)
    }

    /// As `cast`, refusing a cast that `casting` does not allow with NumPy's own `TypeError`
    /// ("Cannot cast array data from dtype('float64') to dtype('int32') according to the rule
    /// 'safe'").
    pub fn cast_with<U: ArrayElement>(&self, casting: Casting) -> PyResult<TypedArray<'py, U, D, Read>> {
        // NumPy shows a vector as its lanes on a trailing axis, which its cast would broadcast
        // into rather than convert lane by lane.
        if const { T::DTYPE.is_vector() || U::DTYPE.is_vector() } {
            return Err(PyTypeError::new_err(format!(
                "cast() converts scalars, and {} to {} is a cast of vectors: cast the array of the lanes \
                 (ArrayRef of the lane type, one more dimension) instead",
                T::DTYPE.name,
                U::DTYPE.name
            )));
        }
        let py = self.object().py();
        crate::element::own::register::<U>();
        self.require_host().map_err(|_| {
            PyValueError::new_err(format!(
                "cast() converts host data, and this argument is on cuda:{}: cast it in its own framework \
                 (x.astype(...) in CuPy, x.to(...) in PyTorch) before the call",
                self.device().id
            ))
        })?;
        // A NumPy array is cast as it is (NumPy reads any layout and alignment itself), unless
        // it is misaligned (its aligned copy may hold this call's writes); anything else
        // through a NumPy view of the memory this argument reads, which lives for the call.
        let numpy = self.object().get_type();
        let source = if npyffi::is_array_type(&numpy) && !self.misaligned() {
            self.object().clone()
        } else {
            let data = self.host_ptr()?;
            // SAFETY: every index of the shape reaches, through these element strides, an
            // initialised `T` that this argument holds (borrowed, or its aligned copy) while
            // `&self` lives, which outlasts the view: the cast below copies out of it, and the
            // view is dropped before returning. NumPy may not write through it (read-only).
            unsafe {
                npyffi::dtype::array_over(
                    py,
                    &T::DTYPE,
                    self.shape(),
                    Some(self.strides()),
                    data.cast(),
                    Some(self.object().clone()),
                    true,
                )
            }?
        };
        // SAFETY: `source` is a NumPy array (checked, or made above).
        let cast = unsafe { npyffi::dtype::cast(&source, &U::DTYPE, casting as std::ffi::c_int) }?;
        // NumPy's new array, read as an argument is (no protocol to look up: it is NumPy's).
        let read = crate::python::source::numpy::read(&cast, true)?;
        TypedArray::check(cast, read).map_err(ArgumentError::raise)
    }
}
