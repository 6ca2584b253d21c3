//! The MemArray design's kernel, `add_index`: adds the sum of an element's indices to it. The
//! CUDA C is written from the element's DLPack facts (so a dtype added to the spec needs no
//! Rust edit) against amso.cuh's `Indexer`, compiled by NVRTC (`compile.rs`) for the device's
//! architecture on first use per `(dtype, ndim, index width, device)`, and cached.

use std::sync::Arc;

use cudarc::driver::{sys, CudaFunction, DeviceRepr, LaunchConfig, PushKernelArg};

use super::context::{context, Current};
use super::driver::cuda_error;
use super::stream::StreamHandle;
use crate::device::DeviceId;
use crate::element::DType;
use crate::error::{Error, Result};

/// The element as CUDA sees it: a storage type and the body of `add_index(x, s)`.
fn cuda_element(dtype: &DType) -> Result<(String, &'static str)> {
    let unsupported = || {
        Error::Unavailable(format!(
            "no CUDA kernel for dtype {} ({} bits x {} lanes)",
            dtype.name, dtype.bits, dtype.lanes
        ))
    };
    if dtype.is_vector() {
        return Err(Error::Unavailable(format!(
            "add_index_tuple writes one index sum per element, and a {} element is {} lanes: call it on \
             a.scalar_view(), the lanes as a last axis",
            dtype.name, dtype.lanes
        )));
    }
    if dtype.lanes != 1 {
        return Err(unsupported());
    }
    if dtype.code > crate::element::dlpack_code::BOOL {
        return Err(Error::Unavailable(format!(
            "add_index_tuple does not run on {}: a float of {} bits holds few index sums exactly; convert the array \
             to float16 or float32 first",
            dtype.name, dtype.bits
        )));
    }
    let integer = |signed: bool| -> Result<String> {
        let base = match dtype.bits {
            8 => "char",
            16 => "short",
            32 => "int",
            64 => "long long",
            _ => return Err(unsupported()),
        };
        Ok(format!("{} {base}", if signed { "signed" } else { "unsigned" }))
    };
    // Integer sums wrap as NumPy's astype does: add in unsigned 64-bit, then truncate.
    const WRAP: &str = "return (elem_t)((unsigned long long)x + s);";
    use crate::element::dlpack_code::{BFLOAT, BOOL, COMPLEX, FLOAT, INT, UINT};
    Ok(match (dtype.code, dtype.bits) {
        (INT, _) => (integer(true)?, WRAP),
        (UINT, _) => (integer(false)?, WRAP),
        (FLOAT, 32) => ("float".into(), "return x + (float)s;"),
        (FLOAT, 64) => ("double".into(), "return x + (double)s;"),
        // float16: widen, add in float, round to nearest even (PTX cvt), as NumPy via float32.
        (FLOAT, 16) => (
            "unsigned short".into(),
            "float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(x)); f += (float)s; \
             unsigned short r; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(r) : \"f\"(f)); return r;",
        ),
        // bfloat16: widen by shifting, add in float, round to nearest even by hand (NaN kept).
        (BFLOAT, 16) => (
            "unsigned short".into(),
            "float f = __uint_as_float(((unsigned int)x) << 16) + (float)s; unsigned int u = __float_as_uint(f); \
             if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); \
             u += 0x7fffu + ((u >> 16) & 1u); return (unsigned short)(u >> 16);",
        ),
        (COMPLEX, 64) => ("struct { float re, im; }".into(), "x.re += (float)s; return x;"),
        (COMPLEX, 128) => ("struct { double re, im; }".into(), "x.re += (double)s; return x;"),
        (BOOL, 8) => ("unsigned char".into(), "return (x != 0 || s != 0) ? 1 : 0;"),
        _ => return Err(unsupported()),
    })
}

/// Elements per 16-byte vector access for `dtype` (at least 1).
pub(crate) fn vector_width(dtype: &DType) -> usize {
    (16 / dtype.itemsize().max(1)).max(1)
}

/// The kernel's source for `dtype` and `ndim`; `wide` selects 64-bit index arithmetic.
///
/// Each thread takes a 16-byte vector of consecutive elements (one coalesced load and store),
/// unravels the first element's index once, and steps the rest like an odometer, so the
/// integer divisions are paid once per vector rather than per element.
pub(crate) fn add_index_source(dtype: &DType, ndim: usize, wide: bool) -> Result<String> {
    let (storage, body) = cuda_element(dtype)?;
    let index = if wide { "unsigned long long" } else { "unsigned int" };
    let vec = vector_width(dtype);
    let align = vec * dtype.itemsize();
    Ok(format!(
        r#"// amso add_index for {name}, {ndim}-D ({index} indices, {vec} elements per vector).
#include "amso.cuh"
typedef {storage} elem_t;
typedef {index} index_t;
// The element's bits as the arithmetic below reads them, in amso's indexer.
typedef amso::Indexer<elem_t, {ndim}> Indexer;
struct __align__({align}) Vec {{ elem_t v[{vec}]; }};

__device__ __forceinline__ elem_t add_index(elem_t x, unsigned long long s) {{ {body} }}

// Index sum of linear offset i, and its per-dimension index in idx.
__device__ __forceinline__ unsigned long long unravel(const Indexer& a, index_t i, index_t* idx) {{
    unsigned long long sum = 0;
#pragma unroll
    for (int d = {ndim} - 1; d > 0; --d) {{
        const index_t dim = (index_t)a.shape[d];
        const index_t q = i / dim;
        idx[d] = i - q * dim;
        sum += idx[d];
        i = q;
    }}
    idx[0] = i;
    return sum + i;
}}

// Step idx (and its sum) to the next element in C order.
__device__ __forceinline__ void step(const Indexer& a, index_t* idx, unsigned long long& sum) {{
    ++idx[{ndim} - 1];
    ++sum;
#pragma unroll
    for (int d = {ndim} - 1; d > 0; --d) {{
        if (idx[d] < (index_t)a.shape[d]) break;
        sum -= idx[d];
        idx[d] = 0;
        ++idx[d - 1];
        ++sum;
    }}
}}

extern "C" __global__ void amso_add_index(const Indexer a) {{
    index_t size = 1;
#pragma unroll
    for (int d = 0; d < {ndim}; ++d) size *= (index_t)a.shape[d];
    const index_t vectors = size / {vec};
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    const index_t first = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    Vec* data = reinterpret_cast<Vec*>(a.data);
    index_t idx[{ndim}];
    for (index_t v = first; v < vectors; v += stride) {{
        Vec chunk = data[v];
        unsigned long long sum = unravel(a, v * {vec}, idx);
#pragma unroll
        for (int j = 0; j < {vec}; ++j) {{
            chunk.v[j] = add_index(chunk.v[j], sum);
            step(a, idx, sum);
        }}
        data[v] = chunk;
    }}
    // The tail that does not fill a vector.
    for (index_t i = vectors * {vec} + first; i < size; i += stride) {{
        a.data[i] = add_index(a.data[i], unravel(a, i, idx));
    }}
}}
"#,
        name = dtype.name
    ))
}

fn function(dtype: &DType, ndim: usize, wide: bool, device_id: DeviceId) -> Result<Arc<CudaFunction>> {
    super::compile::function(&add_index_source(dtype, ndim, wide)?, "amso_add_index", &[], device_id)
}

/// `add_index`'s one parameter: a device indexer of any rank. The kernel reads its own
/// `{ data, shape[ndim] }` prefix of this struct.
#[repr(C)]
pub(crate) struct AnyRankIndexer {
    pub(crate) data: u64,
    pub(crate) shape: [u64; crate::shape::MAX_NDIM],
}

// SAFETY: `#[repr(C)]` plain data; see above for what the kernel reads.
unsafe impl DeviceRepr for AnyRankIndexer {}

/// Launch `add_index` over the `ndim`-dimensional array of `dtype` that `indexer` describes,
/// on `stream`.
///
/// # Safety
/// `indexer` describes live device memory of `dtype` on `device_id`, with its first `ndim`
/// dimensions.
pub(crate) unsafe fn launch_add_index(
    dtype: &DType,
    ndim: usize,
    indexer: &AnyRankIndexer,
    device_id: DeviceId,
    stream: StreamHandle,
) -> Result<()> {
    let size: u64 = indexer.shape[..ndim].iter().product();
    if size == 0 {
        return Ok(());
    }
    // 32-bit indices are cheaper; below 2^31 elements a grid-stride step cannot wrap them.
    let wide = size >= 1 << 31;
    let function = function(dtype, ndim, wide, device_id)?;
    // Reached from Rust callers that hold the GIL too (`TypedMut::add_index_tuple`).
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        const BLOCK: u64 = 256;
        let sms = context(device_id)?
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(cuda_error("cuDeviceGetAttribute"))?;
        let grid = size.div_ceil(BLOCK).min(sms.max(1) as u64 * 32) as u32;
        let config = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (BLOCK as u32, 1, 1), shared_mem_bytes: 0 };
        let stream = stream.borrow(device_id)?;
        // SAFETY: the kernel takes one by-value `{ data, shape[ndim] }`, the prefix of
        // `indexer`, and the caller guarantees the memory it describes.
        unsafe { stream.launch_builder(&function).arg(indexer).launch(config) }
            .map(drop)
            .map_err(cuda_error("cuLaunchKernel"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::ArrayElement;

    #[test]
    fn every_spec_dtype_has_a_kernel_source_or_a_clear_refusal() {
        crate::element::for_each_element(&mut |dtype, _| match add_index_source(dtype, 3, false) {
            Ok(source) => {
                assert!(dtype.code < 7 && dtype.lanes == 1, "{}", dtype.name);
                assert!(
                    source.contains("amso_add_index") && source.contains("amso::Indexer<elem_t, 3>"),
                    "{}",
                    dtype.name
                );
                assert!(source.contains("#include \"amso.cuh\""), "the kernel is written against the generated header");
            }
            // The low-precision floats and packed vectors: too few bits for index sums; CUDA's
            // vectors: several values per element.
            Err(error) => {
                assert!(dtype.code >= 7 || dtype.is_vector(), "{}: {error}", dtype.name);
                assert!(error.to_string().contains(dtype.name), "{error}");
            }
        });
        let wide = add_index_source(&<f32 as ArrayElement>::DTYPE, 1, true).unwrap();
        assert!(wide.contains("typedef unsigned long long index_t"));
    }

    #[test]
    fn no_driver_is_a_clear_error_not_a_panic() {
        if super::super::is_available() {
            return;
        }
        let error = super::super::device_count().unwrap_err();
        assert!(error.to_string().contains("no CUDA driver found"), "{error}");
    }
}
