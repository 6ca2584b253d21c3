//! `Element`: everything an element type tells the outside world (its DLPack type, NumPy
//! name, C type) and how one value converts to and from a plain `Scalar`. The impls are
//! generated from the spec's dtype table by build.rs.

use std::any::TypeId;

use crate::error::Result;

/// The largest alignment an element type may have, and the alignment of amso's host memory:
/// malloc's own (16 bytes on 64-bit targets), which covers every element type. Asking the
/// system allocator for more makes `alloc_zeroed` memset the whole block instead of using
/// calloc's lazily zeroed pages, which costs time and resident memory for large arrays.
pub(crate) const MAX_ALIGN: usize = 16;

/// One element type's facts, as the spec states them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DType {
    /// amso's name of the element type, the spec's key (`float32`, `float4_e2m1fn_x2`): what
    /// `amso.MemArray(shape, dtype)` and `#[amso_array]` accept and errors print.
    pub name: &'static str,
    /// DLPack type code (`kDLInt` = 0, ...).
    pub code: u8,
    /// Bits per lane.
    pub bits: u8,
    /// Vector lanes.
    pub lanes: u16,
    /// The NumPy dtype arrays of this type show as (`np.dtype(numpy)`, from `numpy_module`
    /// when set): the same as `name` except where NumPy has no such type, as for
    /// `float4_e2m1fn_x2`, whose NumPy view is `uint8`.
    pub numpy: &'static str,
    /// Module that defines the NumPy dtype when NumPy does not (`ml_dtypes`).
    pub numpy_module: Option<&'static str>,
    /// The C type in generated/amso.h.
    pub c_type: &'static str,
    /// Array-interface typestr, e.g. `<f4`.
    pub typestr: &'static str,
    /// A record's fields in C layout order (empty for every other type): a record is plain data
    /// DLPack cannot describe, matched against NumPy structured dtypes field by field.
    pub fields: &'static [Field],
}

/// One field of a record element type: its name, element type, fixed shape (empty for a single
/// element; `[3]` for `pos: [f32; 3]`) and byte offset in the record, as C lays it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Field {
    /// The field's name, as NumPy's structured dtype names it.
    pub name: &'static str,
    /// The element type of each entry.
    pub dtype: &'static DType,
    /// The fixed shape of the field (empty for one entry).
    pub shape: &'static [usize],
    /// Bytes from the record's start.
    pub offset: usize,
}

impl Field {
    /// Entries in the field (the product of its shape).
    pub const fn count(&self) -> usize {
        let mut count = 1;
        let mut axis = 0;
        while axis < self.shape.len() {
            count *= self.shape[axis];
            axis += 1;
        }
        count
    }
}

/// DLPack's kDLOpaqueHandle: the code of the kinds DLPack never carries (NumPy's `object`,
/// records), which it only sizes.
pub const OPAQUE_HANDLE: u8 = 3;

/// The NumPy kind name typed arguments give every record (its fields are compared one by one).
pub const RECORD: &str = "record";

impl DType {
    /// Bytes per element: a sub-byte element takes one byte (padded).
    pub const fn itemsize(&self) -> usize {
        (self.bits as usize * self.lanes as usize).div_ceil(8)
    }

    /// Whether an element leaves bits of its byte unused (one sub-byte lane): exported with
    /// DLPack's padded flag, imported only with it.
    pub const fn padded(&self) -> bool {
        !(self.bits as usize * self.lanes as usize).is_multiple_of(8)
    }

    /// Whether NumPy alone has this kind (`object`, `datetime64[s]`, `timedelta64[ms]`, `S8`,
    /// `U4`, records): DLPack has no such type (its DLPack fields only size it), so typed
    /// arguments take it from NumPy arrays of exactly that dtype, and results go to NumPy only
    /// (host records also to amso's record classes, over NumPy's array).
    pub const fn numpy_only(&self) -> bool {
        self.is_record() || numpy_only_name(self.numpy)
    }

    /// Whether this is a vector of whole lanes (CUDA's `float4`: 4 lanes of float32), which
    /// NumPy, the array interfaces and the buffer protocol show as a trailing axis of
    /// `lanes` values of the lane's dtype (`numpy`).
    pub const fn is_vector(&self) -> bool {
        vector_type(self.dlpack()) && !self.numpy_only()
    }

    /// A vector's lane type (float32 for float32x4); `None` for other types.
    #[cfg(feature = "python")]
    pub(crate) fn lane(&self) -> Option<&'static DType> {
        self.is_vector().then(|| DType::from_dlpack_type((self.code, self.bits, 1))).flatten()
    }

    /// Whether an element is several values (a record's fields, a vector's lanes), which
    /// Python reads through NumPy views rather than as one scalar.
    pub fn is_compound(&self) -> bool {
        self.is_record() || self.is_vector()
    }

    /// Whether this is a record (a C struct of fields): see [`Field`].
    pub const fn is_record(&self) -> bool {
        !self.fields.is_empty()
    }

    /// As DLPack's `DLDataType`.
    pub const fn dl_data_type(&self) -> dlpark::ffi::DLDataType {
        dlpark::ffi::DLDataType { code: dlpark::ffi::DLDataTypeCode(self.code), bits: self.bits, lanes: self.lanes }
    }

    /// DLPack's (code, bits, lanes).
    pub const fn dlpack(&self) -> (u8, u8, u16) {
        (self.code, self.bits, self.lanes)
    }

    /// The dtype with DLPack type (code, bits, lanes): the spec's, else one of this
    /// extension's own element types that it has used (`#[derive(Element)]`).
    pub fn from_dlpack_type((code, bits, lanes): (u8, u8, u16)) -> Option<&'static DType> {
        known().find(|d| d.code == code && d.bits == bits && d.lanes == lanes)
    }

    /// The dtype NumPy names `name` (`np.dtype(x).name`), as `from_dlpack` looks.
    pub fn from_numpy_name(name: &str) -> Option<&'static DType> {
        known().find(|d| d.numpy == name)
    }

    /// The dtype with array-interface typestr `typestr` (`<f4`, `|b1`), as `from_dlpack`
    /// looks, if one alone has it (`|V1` is every float8). `<`, `=` and `|` all read as
    /// little-endian, the only order amso handles; `>` finds nothing.
    pub fn from_typestr(typestr: &str) -> Option<&'static DType> {
        let (order, rest) = typestr.split_at_checked(1)?;
        if !matches!(order, "<" | "=" | "|") {
            return None;
        }
        // A vector's typestr is its lane's: a typestr names the lane type.
        let mut found = known().filter(|d| d.typestr.get(1..) == Some(rest) && !d.is_vector());
        let first = found.next()?;
        found.all(|other| other.dlpack() == first.dlpack()).then_some(first)
    }
}

/// Whether DLPack type (code, bits, lanes) is a vector of whole lanes (CUDA's `float4`): what
/// `DType::is_vector` says of a known type, for a producer's or a tensor's type (NumPy's own
/// kinds, which DLPack's fields only size, are the caller's to set apart).
pub(crate) const fn vector_type((_, bits, lanes): (u8, u8, u16)) -> bool {
    lanes > 1 && bits >= 8
}

/// The alignment memory must have for amso to adopt it as elements of `dtype`, whose Rust type
/// is aligned to `rust_align`: a vector's own size (C's `amso_float32x4_t` and CUDA's `float4`
/// loads need it, whoever produced the memory), else the Rust type's. The one rule of every path
/// that adopts memory (pickles, buffers, DLPack, the interface dict).
pub(crate) const fn adoption_alignment(dtype: &DType, rust_align: usize) -> usize {
    if dtype.is_vector() && !dtype.is_record() && dtype.itemsize() > rust_align {
        dtype.itemsize()
    } else {
        rust_align
    }
}

/// Whether `name` starts with `prefix`, in a `const fn` (which `<[u8]>::starts_with` is not).
pub(crate) const fn starts_with(name: &[u8], prefix: &[u8]) -> bool {
    if name.len() < prefix.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if name[i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether `numpy` is the canonical name of a NumPy kind DLPack lacks: `object`,
/// `datetime64[UNIT]`, `timedelta64[UNIT]`, `S<n>` (bytes) or `U<n>` (unicode), as typed
/// arguments name the arrays they meet.
pub(crate) const fn numpy_only_name(numpy: &str) -> bool {
    // Byte by byte (`starts_with`), so that a typed argument's check knows the answer at compile time.
    const fn counted(name: &[u8]) -> bool {
        let mut i = 1;
        while i < name.len() {
            if !name[i].is_ascii_digit() {
                return false;
            }
            i += 1;
        }
        name.len() > 1
    }
    let name = numpy.as_bytes();
    (starts_with(name, b"object") && name.len() == 6)
        || (starts_with(name, b"datetime64[") || starts_with(name, b"timedelta64[")) && name[name.len() - 1] == b']'
        || (starts_with(name, b"S") || starts_with(name, b"U")) && counted(name)
}

/// The spec's element types, then the extension's own that it has met.
fn known() -> impl Iterator<Item = &'static DType> {
    ALL.iter().copied().chain(own::registered())
}

pub(crate) mod own;

#[cfg(feature = "python")]
/// Why a producer's DLPack type (code, bits, lanes) is not one DLPack defines, if it is not:
/// an unknown code, bits the code does not have, no lanes.
pub(crate) fn check_dlpack_type((code, bits, lanes): (u8, u8, u16)) -> std::result::Result<(), String> {
    let Some(&(_, name, allowed)) = generated::DLPACK_CODES.iter().find(|row| row.0 == code) else {
        return Err(format!("the producer's DLPack type code {code} is not an element type DLPack 1.3 defines"));
    };
    if !allowed.contains(&bits) || lanes == 0 {
        let list = allowed.iter().map(u8::to_string).collect::<Vec<_>>().join(", ");
        return Err(format!(
            "the producer says {name} with {bits} bits x {lanes} lanes; DLPack's {name} has {list} bits per lane and \
             at least one lane"
        ));
    }
    Ok(())
}

/// What a DLPack type (code, bits, lanes) is called in messages: the spec's name
/// (`float64`, `bfloat16`), else its DLPack fields.
#[cfg(feature = "python")]
pub(crate) fn dlpack_type_name(dlpack: (u8, u8, u16)) -> String {
    match DType::from_dlpack_type(dlpack) {
        Some(dtype) => dtype.name.to_owned(),
        None => format!("DLPack type (code {}, bits {}, lanes {})", dlpack.0, dlpack.1, dlpack.2),
    }
}

/// A type typed array arguments can hold: every [`Element`] (plain data), and the NumPy kinds
/// that are not plain data or have no DLPack type: `Py<PyAny>` (NumPy's `object`), fixed-width
/// strings ([`FixedBytes`](crate::kinds::FixedBytes), [`FixedUnicode`](crate::kinds::FixedUnicode)). What
/// needs plain data (DLPack export, device moves, kernels, pools, amso's own arrays) asks for
/// [`Element`], so these kinds reach none of it.
///
/// # Safety
/// `DTYPE` must describe `Self` exactly: its size is `DTYPE.itemsize()` and memory that a NumPy
/// array of dtype `DTYPE.numpy` (or a producer of the DLPack type `DTYPE.dlpack()`, for a kind
/// that is not [`DType::numpy_only`]) holds is a valid `Self` at every element, except for the
/// two kinds the runtime checks at extraction: kDLBool (bytes 0 and 1 only) and NumPy's
/// `object` (no NULL entries; only `pyo3::Py<PyAny>`, whose references the array owns, may
/// have that dtype).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an element type of amso's typed arguments",
    note = "element types are the dtypes of specs/types.yaml, usize and isize, Datetime<U> and Timedelta<U>, \
            FixedBytes<N> and FixedUnicode<N>, Py<PyAny>, and types of your own with #[derive(amso_macros::Element)]"
)]
pub unsafe trait ArrayElement: Sized + Send + Sync + 'static {
    /// This type's facts.
    const DTYPE: DType;
    /// Whether the type is one of the spec's (the runtime knows those without being told).
    #[doc(hidden)]
    const IN_SPEC: bool = false;
}

/// A type amso arrays can hold: plain data, which DLPack, device memory, kernels and pools
/// move as bytes.
///
/// # Safety
/// `DTYPE` must describe `Self` exactly (size = bits x lanes / 8, same representation as the
/// DLPack type), and the all-zero bit pattern must be a valid value equal to `Default`:
/// arrays are allocated zeroed and shared with foreign code through DLPack. Every bit pattern
/// must be a valid value too, except for kDLBool (one byte, 0 or 1), which amso normalises
/// when it reads foreign memory (`read_element`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an amso element type",
    note = "element types are the dtypes of specs/types.yaml, and types of your own with #[derive(amso_macros::Element)]"
)]
pub unsafe trait Element: ArrayElement + Copy + Default + std::fmt::Debug {
    /// The value as a plain scalar (for Python and other dynamic callers); an error for a type
    /// that is not one value (a record, whose fields are read instead).
    fn to_scalar(self) -> Result<Scalar>;
    /// A value from a plain scalar, converted as NumPy's item assignment does.
    fn from_scalar(value: Scalar) -> Result<Self>;
}

/// `&T::DTYPE` as a `'static` reference (a constant of a generic type is not promoted).
#[cfg(feature = "python")]
pub(crate) struct DTypeOf<T>(std::marker::PhantomData<T>);

#[cfg(feature = "python")]
impl<T: ArrayElement> DTypeOf<T> {
    pub(crate) const REF: &'static DType = &T::DTYPE;
}

/// Types whose every bit pattern is a value, with no padding: what `#[derive(Element)]` may
/// wrap. Sealed: integers, IEEE and bfloat floats, complex numbers and arrays of them.
#[diagnostic::on_unimplemented(
    message = "#[derive(Element)] cannot wrap `{Self}`: not every bit pattern of it is known to be a value",
    note = "the derive wraps integers, floats (f16, bf16, f32, f64), complex numbers or arrays of them; for \
            another field type, write `unsafe impl amso_runtime::Element` by hand and uphold its safety contract"
)]
pub trait PlainBits: plain::Sealed {}

mod plain {
    pub trait Sealed {}
    macro_rules! plain {
        ($($t:ty),*) => { $( impl Sealed for $t {} impl super::PlainBits for $t {} )* };
    }
    plain!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64, half::f16, half::bf16);
    plain!(num_complex::Complex<f32>, num_complex::Complex<f64>);
    impl<T: super::PlainBits, const N: usize> Sealed for [T; N] {}
    impl<T: super::PlainBits, const N: usize> super::PlainBits for [T; N] {}
}

/// Two float4 e2m1fn values packed in one byte, the first in the low four bits: PyTorch's
/// `float4_e2m1fn_x2` (DLPack kDLFloat4_e2m1fn, 4 bits, 2 lanes). amso stores and moves them;
/// as Python values they are their raw byte.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Float4E2M1FnX2(pub u8);

impl Float4E2M1FnX2 {
    /// The pair `(first, second)`.
    pub fn from_pair(first: microfloat::f4e2m1fn, second: microfloat::f4e2m1fn) -> Self {
        Float4E2M1FnX2((first.to_bits() & 0x0f) | (second.to_bits() << 4))
    }

    /// The two values, first (low bits) and second.
    pub fn pair(self) -> (microfloat::f4e2m1fn, microfloat::f4e2m1fn) {
        (microfloat::f4e2m1fn::from_bits(self.0 & 0x0f), microfloat::f4e2m1fn::from_bits(self.0 >> 4))
    }
}

impl std::fmt::Debug for Float4E2M1FnX2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (first, second) = self.pair();
        write!(f, "Float4E2M1FnX2({}, {})", first.to_f32(), second.to_f32())
    }
}

/// A dynamically typed element value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer above `i64::MAX` (or from an unsigned element).
    UInt(u64),
    /// A real number.
    Float(f64),
    /// A complex number (real, imaginary).
    Complex(f64, f64),
}

/// Whether `T::default()` is all-zero bits (what zeroed allocation relies on).
#[cfg(test)]
pub(crate) fn default_is_zero_bits<T: Element>() -> bool {
    let value = T::default();
    // SAFETY: `value` is a live, initialised `T`; viewing its bytes is always valid for the
    // padding-free scalar types Element allows.
    let bytes = unsafe { std::slice::from_raw_parts((&value as *const T).cast::<u8>(), std::mem::size_of::<T>()) };
    bytes.iter().all(|&b| b == 0)
}

/// Whether `T`'s bit patterns include invalid values: `bool` (kDLBool), whose one byte must be
/// 0 or 1 in Rust while producers may store any byte, and records with bool fields. Every other
/// element kind (integers, IEEE and bfloat floats, complex) is valid for every bit pattern.
const fn has_invalid_bit_patterns<T: Element>() -> bool {
    T::DTYPE.code == dlpack_code::BOOL || record_has_bool(&T::DTYPE)
}

/// Whether a record has a bool field (false for every other type).
pub(crate) const fn record_has_bool(dtype: &DType) -> bool {
    let mut index = 0;
    while index < dtype.fields.len() {
        if dtype.fields[index].dtype.code == dlpack_code::BOOL {
            return true;
        }
        index += 1;
    }
    false
}

/// The byte offsets in a record of its bool entries (each field's, through its shape), which
/// must hold 0 or 1; none for every other type.
pub(crate) fn record_bool_bytes(dtype: &DType) -> impl Iterator<Item = usize> + '_ {
    let bools = dtype.fields.iter().filter(|f| f.dtype.code == dlpack_code::BOOL);
    bools.flat_map(|f| (0..f.count()).map(move |entry| f.offset + entry * f.dtype.itemsize()))
}

/// One stretch of a record's bytes in address order: a field, or C's padding (`Gap` bytes).
#[cfg(feature = "python")]
pub(crate) enum Stretch<'a> {
    Field(&'a Field),
    Gap(usize),
}

/// A record's bytes in address order: its fields, with the padding before, between and after
/// them, as the array interface's `descr` and PEP 3118's struct format spell a record.
#[cfg(feature = "python")]
pub(crate) fn record_stretches(dtype: &DType) -> Vec<Stretch<'_>> {
    let mut fields: Vec<&Field> = dtype.fields.iter().collect();
    fields.sort_by_key(|f| f.offset);
    let (mut stretches, mut end) = (Vec::new(), 0);
    for field in fields {
        if field.offset > end {
            stretches.push(Stretch::Gap(field.offset - end));
        }
        stretches.push(Stretch::Field(field));
        end = field.offset + field.count() * field.dtype.itemsize();
    }
    if dtype.itemsize() > end {
        stretches.push(Stretch::Gap(dtype.itemsize() - end));
    }
    stretches
}

/// Read one element from memory amso may not have written (a foreign producer's buffer, a
/// copy back from a device). This is the one place a `T` is made from such bytes: a bool
/// byte other than 0 reads as `true`, as NumPy reads it (in a record's bool fields too).
///
/// # Safety
/// `source` is valid for reads of one `T` (aligned; types that have invalid bit patterns,
/// bools and records with bool fields, are read bytewise, so for them any address will do,
/// which `read_element_unaligned` relies on).
pub(crate) unsafe fn read_element<T: Element>(source: *const T) -> T {
    if !has_invalid_bit_patterns::<T>() {
        // SAFETY: the caller vouches for the read; every bit pattern is a valid `T`.
        return unsafe { source.read() };
    }
    if T::DTYPE.code == dlpack_code::BOOL {
        const { assert!(size_of::<T>() == 1 || T::DTYPE.code != dlpack_code::BOOL) };
        // SAFETY: the caller vouches for one readable byte; 0 and 1 are valid bools.
        return unsafe { std::mem::transmute_copy::<u8, T>(&u8::from(source.cast::<u8>().read() != 0)) };
    }
    // A record with bool fields: its bytes, each bool entry made 0 or 1.
    let mut bytes = std::mem::MaybeUninit::<T>::uninit();
    // SAFETY: the caller vouches for one readable `T`; `bytes` holds one.
    unsafe { std::ptr::copy_nonoverlapping(source.cast::<u8>(), bytes.as_mut_ptr().cast::<u8>(), size_of::<T>()) };
    // SAFETY: `bytes` holds one `T`'s bytes, just copied.
    unsafe { normalise_record_bools(&T::DTYPE, bytes.as_mut_ptr().cast::<u8>()) };
    // SAFETY: every field holds a valid value now (bool entries 0 or 1, the rest any bits).
    unsafe { bytes.assume_init() }
}

/// Make each bool entry of the record of `dtype` at `record` 0 or 1 (nothing for other types).
///
/// # Safety
/// `record` points to `dtype.itemsize()` writable bytes laid out as `dtype` states.
pub(crate) unsafe fn normalise_record_bools(dtype: &DType, record: *mut u8) {
    for at in record_bool_bytes(dtype) {
        // SAFETY: a bool entry inside the record (the DType states the layout exactly).
        unsafe {
            let byte = record.add(at);
            byte.write(u8::from(byte.read() != 0));
        }
    }
}

/// As `read_element`, from an address that need not be aligned for `T` (a misaligned array
/// read in place).
///
/// # Safety
/// `source` points to `size_of::<T>()` readable bytes holding a valid `T`'s value (bools and
/// records with bool fields: any bytes, as `read_element`).
pub(crate) unsafe fn read_element_unaligned<T: Element>(source: *const T) -> T {
    if !has_invalid_bit_patterns::<T>() {
        // SAFETY: the caller vouches for the bytes; every bit pattern is a valid `T`.
        return unsafe { source.read_unaligned() };
    }
    // SAFETY: `read_element` reads such types bytewise (a bool is one byte: always aligned).
    unsafe { read_element(source) }
}

/// Read `len` elements starting at `source` (see `read_element`).
///
/// # Safety
/// `source` is valid for reads of `len` elements.
pub(crate) unsafe fn read_elements<T: Element>(source: *const T, len: usize) -> Vec<T> {
    if has_invalid_bit_patterns::<T>() {
        // SAFETY: each offset is below `len`.
        (0..len).map(|offset| unsafe { read_element(source.add(offset)) }).collect()
    } else {
        // SAFETY: the caller vouches for `len` elements; every bit pattern is valid.
        unsafe { std::slice::from_raw_parts(source, len) }.to_vec()
    }
}

/// What type-erased code needs of one element type: its facts, its Rust identity and
/// alignment, and the conversion of one element to and from a `Scalar`. One table per element
/// type (`ElementOps::of::<T>()`), so code over arrays of any type and rank is written once.
#[derive(Debug)]
pub struct ElementOps {
    /// The type's facts.
    pub(crate) dtype: &'static DType,
    /// The alignment memory holding these elements must have (`adoption_alignment`).
    pub(crate) align: usize,
    type_id: fn() -> TypeId,
    read: unsafe fn(*const u8) -> Result<Scalar>,
    write: unsafe fn(Scalar, *mut u8) -> Result<()>,
}

struct OpsOf<T>(std::marker::PhantomData<T>);

impl<T: Element> OpsOf<T> {
    const OPS: &'static ElementOps = {
        assert!(align_of::<T>() <= MAX_ALIGN, "amso's host memory is 16-byte aligned");
        &ElementOps {
            dtype: &T::DTYPE,
            align: adoption_alignment(&T::DTYPE, align_of::<T>()),
            type_id: TypeId::of::<T>,
            read: read_scalar::<T>,
            write: write_scalar::<T>,
        }
    };
}

/// # Safety
/// `source` is valid for reads of one `T` (any alignment).
unsafe fn read_scalar<T: Element>(source: *const u8) -> Result<Scalar> {
    let mut value = std::mem::MaybeUninit::<T>::uninit();
    // SAFETY: the caller vouches for one element's bytes; `value` holds one.
    unsafe { std::ptr::copy_nonoverlapping(source, value.as_mut_ptr().cast::<u8>(), size_of::<T>()) };
    // SAFETY: `value` is aligned and filled; `read_element` makes its bytes a valid `T`.
    unsafe { read_element(value.as_ptr()) }.to_scalar()
}

/// # Safety
/// `out` is valid for writes of one `T` (any alignment).
unsafe fn write_scalar<T: Element>(value: Scalar, out: *mut u8) -> Result<()> {
    let value = T::from_scalar(value)?;
    // SAFETY: the caller vouches for room for one element.
    unsafe { out.cast::<T>().write_unaligned(value) };
    Ok(())
}

impl ElementOps {
    /// The table of `T`.
    pub const fn of<T: Element>() -> &'static ElementOps {
        OpsOf::<T>::OPS
    }

    /// Bytes per element.
    pub(crate) fn itemsize(&self) -> usize {
        self.dtype.itemsize()
    }

    /// Whether this is `T`'s table (the same Rust type, not only the same facts).
    pub(crate) fn describes<T: Element>(&self) -> bool {
        (self.type_id)() == TypeId::of::<T>()
    }

    /// The element whose bytes are at `source`, as a scalar.
    ///
    /// # Safety
    /// `source` is valid for reads of one element of this type.
    pub(crate) unsafe fn read(&self, source: *const u8) -> Result<Scalar> {
        // SAFETY: forwarded.
        unsafe { (self.read)(source) }
    }

    /// Convert `value` to this type (as NumPy's item assignment does) into `out`.
    ///
    /// # Safety
    /// `out` is valid for writes of one element of this type.
    pub(crate) unsafe fn write(&self, value: Scalar, out: *mut u8) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { (self.write)(value, out) }
    }
}

pub mod scalar;

// SAFETY (every `unsafe impl Element` in the generated file): each impl is followed by a
// compile-time assertion that the spec's bits x lanes equal the Rust type's size, and every
// kind the spec accepts (bool, integers, IEEE and bfloat floats, complex) has all-zero bits as
// its default, which `every_element_defaults_to_zero_bits_and_matches_its_size` checks.
#[allow(clippy::undocumented_unsafe_blocks)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/element_impls.rs"));
}

pub(crate) use generated::dlpack_code;
pub use generated::dtypes;
#[cfg(test)]
pub(crate) use generated::for_each_element;
pub(crate) use generated::ALL;
pub(crate) use generated::MAX_NDIM;

#[cfg(test)]
mod tests;
