//! Conversions between `Scalar` and each family of element types, called by the generated
//! `Element` impls. Assignment follows NumPy: floats truncate into integers, integers out of
//! range are errors, complex values do not go into real types.

use num_complex::Complex;
use num_traits::{FromPrimitive, ToPrimitive};

use super::{DType, Scalar};
use crate::error::{Error, Result};

/// Why a record element has no scalar value (it is several: its fields).
pub fn record_is_not_one_value(dtype: &DType) -> Error {
    let names: Vec<&str> = dtype.fields.iter().map(|f| f.name).collect();
    Error::WrongValueType(format!(
        "an element of record {} is not one value but {} ({}); read and write its fields instead: \
         a[\"{}\"] (a NumPy view) in Python, field views or the struct's fields in Rust",
        dtype.name,
        names.len(),
        names.join(", "),
        names.first().copied().unwrap_or("field")
    ))
}

/// Why a vector element (CUDA's `float4`) has no scalar value: it is one per lane.
pub fn lanes_are_not_one_value(dtype: &DType) -> Error {
    Error::WrongValueType(format!(
        "an element of {} is not one value but {} lanes of {}: read and write them as a trailing axis, \
         np.asarray(a) or a.scalar_view() in Python, the array's [{}; {}] elements in Rust",
        dtype.name, dtype.lanes, dtype.numpy, dtype.numpy, dtype.lanes
    ))
}

/// A bool element as a scalar.
pub fn from_bool(value: bool) -> Scalar {
    Scalar::Bool(value)
}

/// A scalar as a bool element (its truth value, as NumPy).
pub fn to_bool(value: Scalar, _: &DType) -> Result<bool> {
    Ok(match value {
        Scalar::Bool(b) => b,
        Scalar::Int(i) => i != 0,
        Scalar::UInt(u) => u != 0,
        Scalar::Float(f) => f != 0.0,
        Scalar::Complex(re, im) => re != 0.0 || im != 0.0,
    })
}

/// A signed integer element as a scalar.
pub fn from_int<T: ToPrimitive>(value: T) -> Scalar {
    Scalar::Int(value.to_i64().expect("signed elements fit in i64"))
}

/// An unsigned integer element as a scalar.
pub fn from_uint<T: ToPrimitive>(value: T) -> Scalar {
    Scalar::UInt(value.to_u64().expect("unsigned elements fit in u64"))
}

/// A scalar as a signed integer element.
pub fn to_int<T: FromPrimitive>(value: Scalar, dtype: &DType) -> Result<T> {
    integer(value, dtype)
}

/// A scalar as an unsigned integer element.
pub fn to_uint<T: FromPrimitive>(value: Scalar, dtype: &DType) -> Result<T> {
    integer(value, dtype)
}

fn integer<T: FromPrimitive>(value: Scalar, dtype: &DType) -> Result<T> {
    let out_of_bounds =
        |shown: String| Error::ValueOutOfRange(format!("Python integer {shown} out of bounds for {}", dtype.name));
    match value {
        Scalar::Bool(b) => T::from_u8(b as u8).ok_or_else(|| out_of_bounds((b as u8).to_string())),
        Scalar::Int(i) => T::from_i64(i).ok_or_else(|| out_of_bounds(i.to_string())),
        Scalar::UInt(u) => T::from_u64(u).ok_or_else(|| out_of_bounds(u.to_string())),
        Scalar::Float(f) if f.is_finite() => {
            let truncated = f.trunc();
            T::from_f64(truncated).ok_or_else(|| out_of_bounds(format!("{truncated}")))
        }
        Scalar::Float(f) => Err(Error::ValueOutOfRange(format!("cannot convert float {f} to integer"))),
        Scalar::Complex(..) => {
            Err(Error::WrongValueType(format!("cannot assign a complex value to an {} element", dtype.name)))
        }
    }
}

/// A real floating-point element (f16, bf16, f32, f64) as a scalar.
pub fn from_float<T: ToPrimitive>(value: T) -> Scalar {
    Scalar::Float(value.to_f64().unwrap_or(f64::NAN))
}

/// A scalar as a real floating-point element (rounded to nearest, overflow to infinity).
pub fn to_float<T: FromPrimitive>(value: Scalar, dtype: &DType) -> Result<T> {
    let real = match value {
        Scalar::Bool(b) => b as u8 as f64,
        Scalar::Int(i) => i as f64,
        Scalar::UInt(u) => u as f64,
        Scalar::Float(f) => f,
        Scalar::Complex(..) => {
            return Err(Error::WrongValueType(format!(
                "cannot assign a complex value to {} element",
                crate::error::with_article(dtype.name)
            )))
        }
    };
    // A finite value beyond the type's range rounds to infinity, as NumPy's cast does.
    T::from_f64(real)
        .or_else(|| T::from_f64(f64::INFINITY.copysign(real)))
        .ok_or_else(|| Error::ValueOutOfRange(format!("{real} does not convert to {}", dtype.name)))
}

/// A complex element as a scalar.
pub fn from_complex<T: ToPrimitive>(value: Complex<T>) -> Scalar {
    Scalar::Complex(value.re.to_f64().unwrap_or(f64::NAN), value.im.to_f64().unwrap_or(f64::NAN))
}

/// A packed vector element (lanes > 1) as its raw bits.
pub fn from_raw<T: super::Element>(value: T) -> Scalar {
    const { assert!(size_of::<T>() <= 8, "raw elements fit in 64 bits") };
    let mut bits = [0u8; 8];
    // SAFETY: `value` is `size_of::<T>()` initialised bytes without padding (Element's
    // contract); they fit in `bits` (asserted).
    unsafe { std::ptr::copy_nonoverlapping((&value as *const T).cast::<u8>(), bits.as_mut_ptr(), size_of::<T>()) };
    Scalar::UInt(u64::from_le_bytes(bits))
}

/// A packed vector element from its raw bits (an integer that fits them).
pub fn to_raw<T: super::Element>(value: Scalar, dtype: &DType) -> Result<T> {
    let raw = match value {
        Scalar::Int(i) => u64::try_from(i).ok(),
        Scalar::UInt(u) => Some(u),
        Scalar::Bool(b) => Some(b as u64),
        Scalar::Float(_) | Scalar::Complex(..) => {
            return Err(Error::WrongValueType(format!(
                "{} element is {} packed {}-bit values: assign its raw bits as an integer",
                crate::error::with_article(dtype.name),
                dtype.lanes,
                dtype.bits
            )))
        }
    };
    let bits = size_of::<T>() * 8;
    match raw.filter(|&r| bits >= 64 || r >> bits == 0) {
        Some(raw) => {
            let mut value = std::mem::MaybeUninit::<T>::uninit();
            // SAFETY: the first `size_of::<T>()` bytes of `raw`, little-endian; every bit
            // pattern of a packed vector element is a value (Element's contract).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    raw.to_le_bytes().as_ptr(),
                    value.as_mut_ptr().cast::<u8>(),
                    size_of::<T>(),
                );
                Ok(value.assume_init())
            }
        }
        None => Err(Error::ValueOutOfRange(format!(
            "raw bits {value:?} do not fit {}-bit {} element",
            crate::error::with_article(bits),
            dtype.name
        ))),
    }
}

/// A scalar as a complex element.
pub fn to_complex<T: FromPrimitive>(value: Scalar, dtype: &DType) -> Result<Complex<T>> {
    let (re, im) = match value {
        Scalar::Bool(b) => (b as u8 as f64, 0.0),
        Scalar::Int(i) => (i as f64, 0.0),
        Scalar::UInt(u) => (u as f64, 0.0),
        Scalar::Float(f) => (f, 0.0),
        Scalar::Complex(re, im) => (re, im),
    };
    let part = |x: f64| {
        T::from_f64(x)
            .or_else(|| T::from_f64(f64::INFINITY.copysign(x)))
            .ok_or_else(|| Error::ValueOutOfRange(format!("{x} does not convert to {}", dtype.name)))
    };
    Ok(Complex::new(part(re)?, part(im)?))
}
