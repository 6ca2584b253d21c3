//! The element kinds beyond the spec's table, as rust-numpy has them: `usize` and `isize`
//! (NumPy's `uintp` / `intp`), `Datetime<U>` and `Timedelta<U>` (NumPy's `datetime64[U]` /
//! `timedelta64[U]`), fixed-width strings `FixedBytes<N>` (`S<N>`) and `FixedUnicode<N>`
//! (`U<N>`), and `Py<PyAny>` (`object`). The last four are [`DType::numpy_only`]: typed
//! arguments take them from NumPy arrays of exactly that dtype, and results go to NumPy.

use crate::element::{scalar, ArrayElement, DType, Element, Scalar};
use crate::error::Result;
use std::fmt::Write as _;

// NumPy's intp and uintp are 64-bit where amso runs (`source` asserts 64-bit producers too).
const _: () = assert!(size_of::<isize>() == 8 && size_of::<usize>() == 8);

// SAFETY: `isize` is `i64`'s size and representation on 64-bit targets (asserted above); every
// bit pattern is a value and zero is its default.
unsafe impl ArrayElement for isize {
    /// NumPy's `intp`, which is `int64`: int64 arrays are `isize` arrays, as in rust-numpy.
    const DTYPE: DType = <i64 as ArrayElement>::DTYPE;
    const IN_SPEC: bool = true;
}

// SAFETY: as above.
unsafe impl Element for isize {
    fn to_scalar(self) -> Result<Scalar> {
        Ok(scalar::from_int(self))
    }

    fn from_scalar(value: Scalar) -> Result<Self> {
        scalar::to_int(value, &Self::DTYPE)
    }
}

// SAFETY: `usize` is `u64`'s size and representation on 64-bit targets (asserted above).
unsafe impl ArrayElement for usize {
    /// NumPy's `uintp`, which is `uint64`.
    const DTYPE: DType = <u64 as ArrayElement>::DTYPE;
    const IN_SPEC: bool = true;
}

// SAFETY: as above.
unsafe impl Element for usize {
    fn to_scalar(self) -> Result<Scalar> {
        Ok(scalar::from_uint(self))
    }

    fn from_scalar(value: Scalar) -> Result<Self> {
        scalar::to_uint(value, &Self::DTYPE)
    }
}

/// NumPy's `datetime64` and `timedelta64` with a unit: `Datetime<units::Seconds>` is
/// `datetime64[s]`, stored as NumPy stores it (an `i64` count of units since the epoch;
/// `i64::MIN` is NaT). Conversions go through `i64` (`From` both ways), as in rust-numpy.
pub mod datetime {
    use std::marker::PhantomData;

    use super::*;

    /// A NumPy time unit.
    pub trait Unit: units::Sealed + Copy + Default + Send + Sync + std::fmt::Debug + 'static {
        /// NumPy's abbreviation (`s`, `ms`, ...).
        const ABBREVIATION: &'static str;
        /// `datetime64[ABBREVIATION]`.
        #[doc(hidden)]
        const DATETIME: &'static str;
        /// `timedelta64[ABBREVIATION]`.
        #[doc(hidden)]
        const TIMEDELTA: &'static str;
        /// `<M8[ABBREVIATION]`.
        #[doc(hidden)]
        const DATETIME_TYPESTR: &'static str;
        /// `<m8[ABBREVIATION]`.
        #[doc(hidden)]
        const TIMEDELTA_TYPESTR: &'static str;
    }

    /// The units NumPy's `datetime64` and `timedelta64` take.
    pub mod units {
        #[doc(hidden)]
        pub trait Sealed {}

        macro_rules! units {
            ($($name:ident $abbreviation:literal $doc:literal;)*) => {$(
                #[doc = $doc]
                #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
                pub struct $name;
                impl Sealed for $name {}
                impl super::Unit for $name {
                    const ABBREVIATION: &'static str = $abbreviation;
                    const DATETIME: &'static str = concat!("datetime64[", $abbreviation, "]");
                    const TIMEDELTA: &'static str = concat!("timedelta64[", $abbreviation, "]");
                    const DATETIME_TYPESTR: &'static str = concat!("<M8[", $abbreviation, "]");
                    const TIMEDELTA_TYPESTR: &'static str = concat!("<m8[", $abbreviation, "]");
                }
            )*};
        }

        units! {
            Years "Y" "Years (`Y`).";
            Months "M" "Months (`M`).";
            Weeks "W" "Weeks (`W`).";
            Days "D" "Days (`D`).";
            Hours "h" "Hours (`h`).";
            Minutes "m" "Minutes (`m`).";
            Seconds "s" "Seconds (`s`).";
            Milliseconds "ms" "Milliseconds (`ms`).";
            Microseconds "us" "Microseconds (`us`).";
            Nanoseconds "ns" "Nanoseconds (`ns`).";
            Picoseconds "ps" "Picoseconds (`ps`).";
            Femtoseconds "fs" "Femtoseconds (`fs`).";
            Attoseconds "as" "Attoseconds (`as`).";
        }
    }

    macro_rules! time_kind {
        ($name:ident, $doc:literal, $numpy:ident, $typestr:ident) => {
            #[doc = $doc]
            #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
            #[repr(transparent)]
            pub struct $name<U: Unit>(i64, PhantomData<U>);

            impl<U: Unit> From<i64> for $name<U> {
                fn from(count: i64) -> Self {
                    $name(count, PhantomData)
                }
            }

            impl<U: Unit> From<$name<U>> for i64 {
                fn from(value: $name<U>) -> i64 {
                    value.0
                }
            }

            // SAFETY: an `i64` (transparent; PhantomData is zero-sized), whose every bit pattern
            // is a count NumPy stores in arrays of this dtype; zero is the default.
            unsafe impl<U: Unit> ArrayElement for $name<U> {
                const DTYPE: DType = DType {
                    name: U::$numpy,
                    code: crate::element::dlpack_code::INT,
                    bits: 64,
                    lanes: 1,
                    numpy: U::$numpy,
                    numpy_module: None,
                    c_type: "int64_t",
                    typestr: U::$typestr,
                    fields: &[],
                };
            }

            // SAFETY: as above.
            unsafe impl<U: Unit> Element for $name<U> {
                fn to_scalar(self) -> Result<Scalar> {
                    Ok(Scalar::Int(self.0))
                }

                fn from_scalar(value: Scalar) -> Result<Self> {
                    scalar::to_int::<i64>(value, &Self::DTYPE).map(Self::from)
                }
            }
        };
    }

    time_kind!(Datetime, "A point in time: NumPy's `datetime64[U]`.", DATETIME, DATETIME_TYPESTR);
    time_kind!(Timedelta, "A span of time: NumPy's `timedelta64[U]`.", TIMEDELTA, TIMEDELTA_TYPESTR);
}

/// `prefix` then `count` in decimal, in a buffer, and the length used.
const fn counted_name(prefix: &[u8], count: usize) -> ([u8; 32], usize) {
    let mut out = [0u8; 32];
    let mut len = 0;
    while len < prefix.len() {
        out[len] = prefix[len];
        len += 1;
    }
    let (mut digits, mut used, mut rest) = ([0u8; 20], 0, count);
    loop {
        digits[used] = b'0' + (rest % 10) as u8;
        used += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    while used > 0 {
        used -= 1;
        out[len] = digits[used];
        len += 1;
    }
    (out, len)
}

/// The text `counted_name` wrote.
const fn text(name: &'static ([u8; 32], usize)) -> &'static str {
    match std::str::from_utf8(name.0.split_at(name.1).0) {
        Ok(text) => text,
        Err(_) => panic!("ASCII"),
    }
}

/// A NumPy byte string of `N` bytes (`S<N>`, rust-numpy's `PyFixedString<N>`), zero-padded
/// at the end as NumPy stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct FixedBytes<const N: usize>(pub [u8; N]);

/// A NumPy unicode string of `N` code points (`U<N>`, rust-numpy's `PyFixedUnicode<N>`): UCS-4
/// in the machine's byte order, zero-padded at the end. NumPy does not check that the values
/// are Unicode scalar values, so they are `u32`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct FixedUnicode<const N: usize>(pub [u32; N]);

impl<const N: usize> FixedBytes<N> {
    const NAME: &'static ([u8; 32], usize) = &counted_name(b"S", N);
    const TYPESTR: &'static ([u8; 32], usize) = &counted_name(b"|S", N);

    /// The bytes before the padding (NumPy's value: trailing zero bytes dropped).
    pub fn trimmed(&self) -> &[u8] {
        let end = self.0.iter().rposition(|&b| b != 0).map_or(0, |last| last + 1);
        &self.0[..end]
    }
}

impl<const N: usize> FixedUnicode<N> {
    const NAME: &'static ([u8; 32], usize) = &counted_name(b"U", N);
    const TYPESTR: &'static ([u8; 32], usize) = &counted_name(b"<U", N);

    /// The text before the padding, if each code point is a `char` (NumPy's value: trailing
    /// zeros dropped).
    pub fn to_string_lossy(&self) -> String {
        let end = self.0.iter().rposition(|&c| c != 0).map_or(0, |last| last + 1);
        self.0[..end].iter().map(|&c| char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)).collect()
    }
}

/// NumPy's value as text: the bytes before the padding, read as UTF-8, each invalid sequence
/// shown as U+FFFD (rust-numpy's `PyFixedString` panics on one).
impl<const N: usize> std::fmt::Display for FixedBytes<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Ok(text) = std::str::from_utf8(self.trimmed()) {
            return f.pad(text); // width, fill and precision as `str`'s
        }
        for chunk in self.trimmed().utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_char(char::REPLACEMENT_CHARACTER)?;
            }
        }
        Ok(())
    }
}

/// NumPy's value as text: the code points before the padding, each one that is not a `char`
/// shown as U+FFFD (as `to_string_lossy`, without the allocation).
impl<const N: usize> std::fmt::Display for FixedUnicode<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.width().is_some() || f.precision().is_some() {
            return f.pad(&self.to_string_lossy()); // width, fill and precision as `str`'s
        }
        let end = self.0.iter().rposition(|&c| c != 0).map_or(0, |last| last + 1);
        self.0[..end].iter().try_for_each(|&c| f.write_char(char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)))
    }
}

impl<const N: usize> From<[u8; N]> for FixedBytes<N> {
    fn from(bytes: [u8; N]) -> Self {
        FixedBytes(bytes)
    }
}

impl<const N: usize> From<[u32; N]> for FixedUnicode<N> {
    fn from(code_points: [u32; N]) -> Self {
        FixedUnicode(code_points)
    }
}

// SAFETY: `N` bytes (transparent), every bit pattern a value; NumPy's `S<N>` holds `N` bytes
// per element. DLPack has none (`numpy_only`), so only NumPy arrays of exactly `S<N>` arrive.
unsafe impl<const N: usize> ArrayElement for FixedBytes<N> {
    const DTYPE: DType = {
        assert!(N >= 1 && N <= u16::MAX as usize, "FixedBytes<N> has 1..=65535 bytes");
        DType {
            name: text(Self::NAME),
            code: crate::element::dlpack_code::UINT,
            bits: 8,
            lanes: N as u16,
            numpy: text(Self::NAME),
            numpy_module: None,
            c_type: "char",
            typestr: text(Self::TYPESTR),
            fields: &[],
        }
    };
}

// SAFETY: `N` u32s (transparent), every bit pattern a value; NumPy's `U<N>` holds `N` UCS-4
// code units per element, in the machine's order (big-endian arrays are refused).
unsafe impl<const N: usize> ArrayElement for FixedUnicode<N> {
    const DTYPE: DType = {
        assert!(N >= 1 && N <= u16::MAX as usize, "FixedUnicode<N> has 1..=65535 code points");
        DType {
            name: text(Self::NAME),
            code: crate::element::dlpack_code::UINT,
            bits: 32,
            lanes: N as u16,
            numpy: text(Self::NAME),
            numpy_module: None,
            c_type: "uint32_t",
            typestr: text(Self::TYPESTR),
            fields: &[],
        }
    };
}

// SAFETY: `Py<PyAny>` is one non-NULL `PyObject*` (transparent over `NonNull`), what a NumPy
// object array stores per element; typed arguments refuse arrays with NULL entries, and the
// array owns one reference per element, which views only borrow. `Py<PyAny>` is usable only
// with a `Python` token (the GIL) and drops its reference safely without one.
#[cfg(feature = "python")]
unsafe impl ArrayElement for pyo3::Py<pyo3::PyAny> {
    const DTYPE: DType = DType {
        name: "object",
        code: crate::element::OPAQUE_HANDLE,
        bits: 64,
        lanes: 1,
        numpy: "object",
        numpy_module: None,
        c_type: "PyObject *",
        typestr: "|O",
        fields: &[],
    };
}

#[cfg(test)]
mod tests {
    use super::datetime::{units, Datetime, Timedelta};
    use super::*;

    #[test]
    fn fixed_strings_display_numpy_values() {
        assert_eq!(FixedBytes(*b"foo\0\0").to_string(), "foo");
        assert_eq!(FixedBytes(*b"a\0b\0").to_string(), "a\0b", "only the padding at the end is dropped");
        assert_eq!(FixedBytes([b'x', 0xff, b'y']).to_string(), "x\u{fffd}y");
        assert_eq!(FixedBytes([0u8; 3]).to_string(), "");
        let text: Vec<u32> = "héllo".chars().map(u32::from).chain([0, 0]).collect();
        assert_eq!(FixedUnicode::<7>(text.try_into().unwrap()).to_string(), "héllo");
        assert_eq!(FixedUnicode([0x41, 0xD800, 0x110000, 0]).to_string(), "A\u{fffd}\u{fffd}");
        assert_eq!(
            format!("[{:>5}|{:<4}|{:.2}]", FixedBytes(*b"ab\0"), FixedUnicode([0x78, 0]), FixedBytes(*b"xyz")),
            "[   ab|x   |xy]"
        );
    }

    #[test]
    fn names_and_sizes() {
        assert_eq!(<Datetime<units::Seconds> as ArrayElement>::DTYPE.numpy, "datetime64[s]");
        assert_eq!(<Timedelta<units::Minutes> as ArrayElement>::DTYPE.typestr, "<m8[m]");
        assert_eq!(<FixedBytes<8> as ArrayElement>::DTYPE.numpy, "S8");
        assert_eq!(<FixedBytes<8> as ArrayElement>::DTYPE.itemsize(), 8);
        assert_eq!(<FixedUnicode<12> as ArrayElement>::DTYPE.typestr, "<U12");
        assert_eq!(<FixedUnicode<12> as ArrayElement>::DTYPE.itemsize(), 48);
        assert_eq!(<isize as ArrayElement>::DTYPE, <i64 as ArrayElement>::DTYPE);
        for dtype in [
            <Datetime<units::Days> as ArrayElement>::DTYPE,
            <FixedBytes<3> as ArrayElement>::DTYPE,
            <FixedUnicode<1> as ArrayElement>::DTYPE,
        ] {
            assert!(dtype.numpy_only(), "{}", dtype.name);
        }
        assert!(!<isize as ArrayElement>::DTYPE.numpy_only());
        for plain in ["float32", "S", "Sx", "U-1", "datetime64", "objects", "uint8"] {
            assert!(!crate::element::numpy_only_name(plain), "{plain}");
        }
        assert_eq!(i64::from(Timedelta::<units::Seconds>::from(-7)), -7);
        assert_eq!(FixedBytes(*b"ab\0\0").trimmed(), b"ab");
        assert_eq!(FixedUnicode([104, 105, 0]).to_string_lossy(), "hi");
    }
}
