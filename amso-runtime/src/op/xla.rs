//! XLA's FFI (`xla/ffi/api/c_api.h`, the C ABI behind `jax.ffi`), as much of it as an op's
//! handler uses: the call frame's buffers, results and scalar attributes, the platform stream,
//! errors, and the metadata probe XLA sends at registration. Written against header 0.1 to
//! 0.3: each struct here is a prefix that has not changed since 0.1, and the one function added
//! later (`XLA_FFI_DeviceOrdinal_Get`) is used only when the `XLA_FFI_Api` in the call frame is
//! long enough to hold it. The version a handler reports is the one the running jaxlib's header
//! declares (`set_version`, from `amso.ops`), which XLA requires to match exactly.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use super::buffer::{Buffer, BufferMut};
use super::signature::{self, panic_message, AttrKind, Op};
use crate::device::{Device, DeviceId};
use crate::element::{DType, Element};
use crate::stream::Stream;

#[repr(C)]
struct ExtensionBase {
    struct_size: usize,
    kind: i32,
    next: *mut ExtensionBase,
}

const EXTENSION_METADATA: i32 = 1;

#[repr(C)]
struct ApiVersion {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    major: i32,
    minor: i32,
}

#[repr(C)]
struct Metadata {
    struct_size: usize,
    api_version: ApiVersion,
    traits: u32,
}

#[repr(C)]
struct MetadataExtension {
    base: ExtensionBase,
    metadata: *mut Metadata,
}

#[repr(C)]
struct ErrorCreateArgs {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    message: *const std::ffi::c_char,
    code: i32,
}

#[repr(C)]
struct StreamGetArgs {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    ctx: *mut c_void,
    stream: *mut c_void,
}

#[repr(C)]
struct DeviceOrdinalGetArgs {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    ctx: *mut c_void,
    ordinal: i32,
}

type ApiFunction = Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>;

/// `XLA_FFI_Api`: its fields in order (the functions as untyped pointers, cast where called).
#[repr(C)]
struct Api {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    api_version: ApiVersion,
    internal_api: *const c_void,
    error_create: ApiFunction,
    error_get_message: ApiFunction,
    error_destroy: ApiFunction,
    handler_register: ApiFunction,
    stream_get: ApiFunction,
    type_register: ApiFunction,
    execution_context_get: ApiFunction,
    state_set: ApiFunction,
    state_get: ApiFunction,
    device_memory_allocate: ApiFunction,
    device_memory_free: ApiFunction,
    thread_pool_schedule: ApiFunction,
    thread_pool_num_threads: ApiFunction,
    future_create: ApiFunction,
    future_set_available: ApiFunction,
    future_set_error: ApiFunction,
    run_id_get: ApiFunction,
    device_ordinal_get: ApiFunction,
}

#[repr(C)]
struct Buffers {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    size: i64,
    types: *const i32,
    values: *const *mut c_void,
}

#[repr(C)]
struct ByteSpan {
    ptr: *const u8,
    len: usize,
}

#[repr(C)]
struct Attrs {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    size: i64,
    types: *const i32,
    names: *const *const ByteSpan,
    values: *const *mut c_void,
}

#[repr(C)]
struct CallFrame {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    api: *const Api,
    ctx: *mut c_void,
    stage: i32,
    args: Buffers,
    rets: Buffers,
    attrs: Attrs,
}

#[repr(C)]
struct XlaBuffer {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    dtype: i32,
    data: *mut c_void,
    rank: i64,
    dims: *const i64,
}

#[repr(C)]
struct Scalar {
    dtype: i32,
    value: *const c_void,
}

const STAGE_EXECUTE: i32 = 3;
const BUFFER: i32 = 1;
const SCALAR: i32 = 3;
const ERROR_INVALID_ARGUMENT: i32 = 3;
const ERROR_INTERNAL: i32 = 13;
/// The handler's traits: none. `XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE` (1) would let
/// XLA record the call into a CUDA graph once and replay it; an op's function may do more than
/// queue work on its stream on its first call (compile its kernel with NVRTC), so XLA runs it
/// as a call of its own every time.
const TRAITS: u32 = 0;

// The layouts of c_api.h (64-bit targets), checked here rather than trusted.
const _: () = {
    assert!(std::mem::offset_of!(CallFrame, stage) == 32);
    assert!(std::mem::offset_of!(CallFrame, args) == 40);
    assert!(std::mem::offset_of!(CallFrame, rets) == 80);
    assert!(std::mem::offset_of!(CallFrame, attrs) == 120);
    assert!(std::mem::offset_of!(Api, error_create) == 48);
    assert!(std::mem::offset_of!(Api, stream_get) == 80);
    assert!(std::mem::offset_of!(Api, device_ordinal_get) == 184);
    assert!(std::mem::offset_of!(XlaBuffer, dims) == 40);
    assert!(std::mem::offset_of!(Metadata, traits) == 32);
};

/// The FFI version the running jaxlib declares (major << 32 | minor), set before registration.
static VERSION: AtomicU64 = AtomicU64::new(3);

/// Report FFI version `major.minor` from now on (XLA refuses a handler of any other).
pub(crate) fn set_version(major: u32, minor: u32) {
    VERSION.store((u64::from(major) << 32) | u64::from(minor), Ordering::Relaxed);
}

/// XLA's dtype number for elements `T`, if XLA has the type.
pub(crate) const fn dtype_code(dtype: &DType) -> Option<i32> {
    let code = match (dtype.code, dtype.bits, dtype.lanes) {
        (_, _, lanes) if lanes != 1 => return None,
        (6, 8, _) => 1, // bool: PRED
        (0, 8, _) => 2,
        (0, 16, _) => 3,
        (0, 32, _) => 4,
        (0, 64, _) => 5,
        (1, 8, _) => 6,
        (1, 16, _) => 7,
        (1, 32, _) => 8,
        (1, 64, _) => 9,
        (2, 16, _) => 10,
        (2, 32, _) => 11,
        (2, 64, _) => 12,
        (4, 16, _) => 16,
        (5, 64, _) => 15,
        (5, 128, _) => 18,
        _ => {
            const FLOAT8: [(&str, i32); 5] = [
                ("float8_e5m2", 19),
                ("float8_e4m3fn", 20),
                ("float8_e4m3b11fnuz", 23),
                ("float8_e5m2fnuz", 24),
                ("float8_e4m3fnuz", 25),
            ];
            let mut i = 0;
            while i < FLOAT8.len() {
                if same(FLOAT8[i].0, dtype.name) {
                    return Some(FLOAT8[i].1);
                }
                i += 1;
            }
            return None;
        }
    };
    Some(code)
}

/// Whether two names are equal (in a `const fn`).
const fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && crate::element::starts_with(a.as_bytes(), b.as_bytes())
}

/// One call of `op`'s handler, for host (`cuda` false) or CUDA buffers: the metadata probe is
/// answered, stages other than execution do nothing, and `body` runs on the decoded frame with
/// its error or panic returned to XLA as an error.
///
/// # Safety
/// `frame` is the `XLA_FFI_CallFrame*` XLA passed the handler.
#[doc(hidden)]
pub unsafe fn call(
    frame: *mut c_void,
    op: &Op,
    cuda: bool,
    body: impl FnOnce(&Frame<'_>) -> Result<(), String>,
) -> *mut c_void {
    // SAFETY: XLA's call frame (the caller's contract).
    let frame = unsafe { &*(frame as *const CallFrame) };
    // SAFETY: a metadata probe carries its extension, whose metadata XLA owns and lets the
    // handler fill (XLA's contract).
    if let Some(metadata) = unsafe { metadata(frame).as_mut() } {
        let version = VERSION.load(Ordering::Relaxed);
        metadata.api_version.major = (version >> 32) as i32;
        metadata.api_version.minor = version as i32;
        metadata.traits = TRAITS;
        return std::ptr::null_mut();
    }
    if frame.stage != STAGE_EXECUTE {
        return std::ptr::null_mut();
    }
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if let Some(refusal) = op.refusal(cuda) {
            return Err((ERROR_INVALID_ARGUMENT, refusal));
        }
        let decoded = Frame::decode(frame, op, cuda)?;
        body(&decoded).map_err(|message| {
            // An argument the frame refused is the caller's mistake; anything else the function's.
            let code = if decoded.refused.get() { ERROR_INVALID_ARGUMENT } else { ERROR_INTERNAL };
            (code, format!("{}(): {message}", op.name))
        })
    }));
    let (code, message) = match outcome {
        Ok(Ok(())) => return std::ptr::null_mut(),
        Ok(Err(error)) => error,
        Err(payload) => (ERROR_INTERNAL, format!("{}() panicked: {}", op.name, panic_message(payload.as_ref()))),
    };
    // SAFETY: the frame's API, as XLA gave it.
    unsafe { error(frame, code, &message) }
}

/// The metadata XLA asks for at registration, if this call is that probe (else NULL).
unsafe fn metadata(frame: &CallFrame) -> *mut Metadata {
    let mut extension = frame.extension_start;
    while !extension.is_null() {
        // SAFETY: XLA's extension chain.
        let base = unsafe { &*extension };
        if base.kind == EXTENSION_METADATA {
            // SAFETY: a metadata extension is a `MetadataExtension` whose metadata XLA owns.
            return unsafe { (*(extension as *const MetadataExtension)).metadata };
        }
        extension = base.next;
    }
    std::ptr::null_mut()
}

/// An XLA error with `message` (NUL bytes dropped).
unsafe fn error(frame: &CallFrame, code: i32, message: &str) -> *mut c_void {
    let text = std::ffi::CString::new(message.replace('\0', "")).unwrap_or_default();
    let mut args = ErrorCreateArgs {
        struct_size: std::mem::size_of::<ErrorCreateArgs>(),
        extension_start: std::ptr::null_mut(),
        message: text.as_ptr(),
        code,
    };
    // SAFETY: the API XLA passed.
    match unsafe { frame.api.as_ref().and_then(|api| api.error_create) } {
        // SAFETY: `XLA_FFI_Error_Create` with its arguments; it copies the message.
        Some(create) => unsafe { create(std::ptr::addr_of_mut!(args).cast()) },
        None => std::ptr::null_mut(),
    }
}

/// A decoded call frame: the op's buffers by parameter position, its attributes and stream,
/// read from XLA's lists where they are (no allocation per call).
#[doc(hidden)]
pub struct Frame<'f> {
    frame: &'f CallFrame,
    stream: Stream,
    device: Device,
    /// Whether an accessor refused an argument.
    refused: std::cell::Cell<bool>,
}

impl<'f> Frame<'f> {
    /// The frame's parts, checked against the op: `INVALID_ARGUMENT` for the caller's mistakes,
    /// `INTERNAL` when XLA gives no stream.
    fn decode(frame: &'f CallFrame, op: &Op, cuda: bool) -> Result<Frame<'f>, (i32, String)> {
        let (stream, device) = if cuda {
            // SAFETY: the frame's API and context, as XLA gave them.
            let stream = unsafe { platform_stream(frame) }.map_err(|message| (ERROR_INTERNAL, message))?;
            // SAFETY: as above.
            (stream, Device::cuda(unsafe { device_ordinal(frame) }))
        } else {
            (Stream::default(), Device::CPU)
        };
        let decoded = Frame { frame, stream, device, refused: std::cell::Cell::new(false) };
        let (ins, outs) = (op.buffers(false).count(), op.buffers(true).count());
        // SAFETY: XLA's lists of `size` entries.
        let all_buffers =
            |list: &Buffers| (0..list.size.max(0) as usize).all(|i| unsafe { *list.types.add(i) } == BUFFER);
        let (given_ins, given_outs) = (frame.args.size.max(0) as usize, frame.rets.size.max(0) as usize);
        if given_ins != ins || given_outs != outs || !all_buffers(&frame.args) || !all_buffers(&frame.rets) {
            return Err((
                ERROR_INVALID_ARGUMENT,
                format!(
                    "{}() takes {ins} array argument(s) and makes {outs} result(s); XLA passed {given_ins} and \
                     {given_outs}: call it through amso.ops.jax(), which declares them",
                    op.name
                ),
            ));
        }
        decoded.disjoint(op).map_err(|message| (ERROR_INVALID_ARGUMENT, message))?;
        Ok(decoded)
    }

    /// Buffer `index` of `list` (checked by `decode` to be one, of `size` entries).
    fn buffer(list: &'f Buffers, index: usize) -> &'f XlaBuffer {
        assert!(index < list.size.max(0) as usize, "a buffer index the op declares");
        // SAFETY: an entry of type BUFFER (`decode`) is an `XLA_FFI_Buffer`, alive for the call.
        unsafe { &*(*list.values.add(index) as *const XlaBuffer) }
    }

    /// Refuse results that share memory with an argument or another result (a caller's
    /// `input_output_aliases`): the function's `BufferMut`s are exclusive.
    fn disjoint(&self, op: &Op) -> Result<(), String> {
        let range = |list: &'f Buffers, index: usize, itemsize: usize| {
            let buffer = Frame::buffer(list, index);
            // SAFETY: `rank` dimensions (XLA's buffer).
            let dims = unsafe { std::slice::from_raw_parts(buffer.dims, buffer.rank.max(0) as usize) };
            let elements = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d.max(0) as usize));
            (buffer.data as usize, elements.and_then(|n| n.checked_mul(itemsize)).unwrap_or(usize::MAX))
        };
        let (args, rets) = (&self.frame.args, &self.frame.rets);
        for (out, (name, size)) in op.buffers(true).enumerate() {
            let written = range(rets, out, size);
            let inputs = op.buffers(false).enumerate().map(|(i, (other, size))| (other, range(args, i, size)));
            let earlier =
                op.buffers(true).take(out).enumerate().map(|(i, (other, size))| (other, range(rets, i, size)));
            if let Some((other, _)) = inputs.chain(earlier).find(|&(_, range)| !signature::apart(written, range)) {
                return Err(format!(
                    "'{other}' and '{name}' share memory, and '{name}' is written: an op's outputs are its own (no \
                     input_output_aliases)"
                ));
            }
        }
        Ok(())
    }

    /// Check the outputs' shapes against their rules (`signature::check_outputs`).
    pub fn check_outputs(&self, op: &Op, shapes: &[(&str, &[usize])], attrs: &[(&str, i64)]) -> Result<(), String> {
        self.refusing(signature::check_outputs(op, shapes, attrs))
    }

    /// Input `index` (named `name`) as a buffer of `T` and rank `N`.
    pub fn input<T: Element, const N: usize>(&self, index: usize, name: &str) -> Result<Buffer<'f, T, N>, String> {
        let (data, shape) = self.refusing(checked::<T, N>(Frame::buffer(&self.frame.args, index), name))?;
        // SAFETY: XLA's dense row-major buffer of that shape, alive for the call.
        Ok(unsafe { Buffer::new(data, shape, self.device) })
    }

    /// Result `index` (named `name`) as a writable buffer of `T` and rank `N`.
    pub fn output<T: Element, const N: usize>(&self, index: usize, name: &str) -> Result<BufferMut<'f, T, N>, String> {
        let (data, shape) = self.refusing(checked::<T, N>(Frame::buffer(&self.frame.rets, index), name))?;
        // SAFETY: as `input`; no other buffer of the call overlaps it (`disjoint`).
        Ok(unsafe { BufferMut::new(data, shape, self.device) })
    }

    fn refusing<R>(&self, result: Result<R, String>) -> Result<R, String> {
        self.refused.set(self.refused.get() || result.is_err());
        result
    }

    /// Attribute `name` as `V`.
    pub fn attr<V: AttrValue>(&self, name: &str) -> Result<V, String> {
        // SAFETY: XLA's attribute list, alive for the call.
        let Some(scalar) = (unsafe { scalar_named(&self.frame.attrs, name) }) else {
            return self.refusing(Err(format!("attribute '{name}' is missing: pass it as a keyword, {name}=...")));
        };
        if scalar.dtype != V::XLA {
            return self.refusing(Err(format!(
                "attribute '{name}' must be a {} scalar, got XLA type {}",
                V::KIND.name(),
                scalar.dtype
            )));
        }
        // SAFETY: a scalar of that XLA type (checked above), alive for the call.
        Ok(unsafe { V::read(scalar.value) })
    }

    /// The stream to queue work on (XLA's, on CUDA; the default on the host).
    pub fn stream(&self) -> Stream {
        self.stream
    }
}

/// Scalar attribute types.
#[doc(hidden)]
pub trait AttrValue: Copy {
    const XLA: i32;
    const KIND: AttrKind;
    /// # Safety
    /// `value` points to a scalar of XLA type `XLA`.
    unsafe fn read(value: *const c_void) -> Self {
        // SAFETY: the caller's contract; XLA's scalars need not be aligned for us.
        unsafe { std::ptr::read_unaligned(value as *const Self) }
    }
}

macro_rules! attr_value {
    ($($type:ty => $xla:expr, $kind:ident;)*) => {$(
        impl AttrValue for $type {
            const XLA: i32 = $xla;
            const KIND: AttrKind = AttrKind::$kind;
        }
    )*};
}

attr_value! {
    f64 => 12, F64;
    f32 => 11, F32;
    i64 => 5, I64;
    i32 => 4, I32;
}

impl AttrValue for bool {
    const XLA: i32 = 1;
    const KIND: AttrKind = AttrKind::Bool;
    unsafe fn read(value: *const c_void) -> bool {
        // SAFETY: a PRED scalar is one byte; any nonzero byte is true (never a `bool` of another bit pattern).
        unsafe { *(value as *const u8) != 0 }
    }
}

fn checked<T: Element, const N: usize>(buffer: &XlaBuffer, name: &str) -> Result<(usize, [usize; N]), String> {
    let expected = const { dtype_code(&T::DTYPE) };
    if expected != Some(buffer.dtype) {
        return Err(format!(
            "argument '{name}' must be {} (XLA type {}), got XLA type {}",
            T::DTYPE.name,
            expected.map_or_else(|| "none".to_owned(), |c| c.to_string()),
            buffer.dtype
        ));
    }
    if buffer.rank != N as i64 {
        return Err(format!("argument '{name}' must have {N} dimension(s), got {}", buffer.rank));
    }
    // SAFETY: `rank` dimensions (XLA's buffer).
    let dims = unsafe { std::slice::from_raw_parts(buffer.dims, N) };
    Ok((buffer.data as usize, std::array::from_fn(|axis| dims[axis].max(0) as usize)))
}

/// The scalar attribute `name`, if the list has one.
///
/// # Safety
/// `attrs` is XLA's list of `size` attributes: each of type SCALAR an `XLA_FFI_Scalar`, each
/// name a byte span.
unsafe fn scalar_named<'f>(attrs: &'f Attrs, name: &str) -> Option<&'f Scalar> {
    (0..attrs.size.max(0) as usize).find_map(|i| {
        // SAFETY: entry `i` of the list (the caller's contract).
        let (kind, span) = unsafe { (*attrs.types.add(i), &**attrs.names.add(i)) };
        // SAFETY: as above: a span of `len` bytes.
        let found = kind == SCALAR && unsafe { std::slice::from_raw_parts(span.ptr, span.len) } == name.as_bytes();
        // SAFETY: a SCALAR entry is an `XLA_FFI_Scalar`.
        found.then(|| unsafe { &*(*attrs.values.add(i) as *const Scalar) })
    })
}

/// XLA's stream for this call (a `cudaStream_t`).
unsafe fn platform_stream(frame: &CallFrame) -> Result<Stream, String> {
    let mut args = StreamGetArgs {
        struct_size: std::mem::size_of::<StreamGetArgs>(),
        extension_start: std::ptr::null_mut(),
        ctx: frame.ctx,
        stream: std::ptr::null_mut(),
    };
    // SAFETY: the API XLA passed, with its context.
    let failed = match unsafe { frame.api.as_ref().and_then(|api| api.stream_get) } {
        // SAFETY: `XLA_FFI_Stream_Get` with its arguments.
        Some(get) => unsafe { get(std::ptr::addr_of_mut!(args).cast()) },
        None => return Err("XLA gave no stream function".to_owned()),
    };
    if !failed.is_null() {
        return Err("XLA gave no CUDA stream for this call".to_owned());
    }
    // SAFETY: XLA's stream, alive for the call.
    Ok(unsafe { Stream::from_handle(args.stream as usize) })
}

/// The CUDA device of this call (0 where the API predates `XLA_FFI_DeviceOrdinal_Get`).
unsafe fn device_ordinal(frame: &CallFrame) -> DeviceId {
    // SAFETY: the API XLA passed, read only as far as its `struct_size` says it reaches.
    let Some(api) = (unsafe { frame.api.as_ref() }) else { return DeviceId::ZERO };
    if api.struct_size < std::mem::offset_of!(Api, device_ordinal_get) + std::mem::size_of::<ApiFunction>() {
        return DeviceId::ZERO;
    }
    let Some(get) = api.device_ordinal_get else { return DeviceId::ZERO };
    let mut args = DeviceOrdinalGetArgs {
        struct_size: std::mem::size_of::<DeviceOrdinalGetArgs>(),
        extension_start: std::ptr::null_mut(),
        ctx: frame.ctx,
        ordinal: 0,
    };
    // SAFETY: as above.
    let failed = unsafe { get(std::ptr::addr_of_mut!(args).cast()) };
    if failed.is_null() {
        DeviceId::new(args.ordinal).unwrap_or(DeviceId::ZERO)
    } else {
        DeviceId::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xla_dtypes_of_the_spec() {
        assert_eq!(dtype_code(&<f32 as crate::ArrayElement>::DTYPE), Some(11));
        assert_eq!(dtype_code(&<f64 as crate::ArrayElement>::DTYPE), Some(12));
        assert_eq!(dtype_code(&<i64 as crate::ArrayElement>::DTYPE), Some(5));
        assert_eq!(dtype_code(&<u8 as crate::ArrayElement>::DTYPE), Some(6));
        assert_eq!(dtype_code(&<bool as crate::ArrayElement>::DTYPE), Some(1));
        assert_eq!(dtype_code(&<half::bf16 as crate::ArrayElement>::DTYPE), Some(16));
        assert_eq!(dtype_code(&<crate::records::Particle as crate::ArrayElement>::DTYPE), None);
    }
}
