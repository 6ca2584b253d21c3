//! Your own CUDA kernels, from Rust: CUDA C++ compiled by NVRTC for each device it runs on
//! (cached per source, options and device), with `#include "amso.cuh"` available, and launched
//! through cudarc's launch builder on the stream amso's stream rule picks (README, "Your own
//! kernels"). Array arguments are `DeviceIndexer`s, which implement cudarc's `DeviceRepr`.
//!
//! ```ignore
//! use amso_runtime::cuda::{with_stream, Kernel, LaunchConfig, PushKernelArg};
//!
//! static SCALE: Kernel = Kernel::new(r#"
//!     #include "amso.cuh"
//!     extern "C" __global__ void scale(amso::Indexer<double, 1> x, double by) {
//!         uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
//!         if (i < x.size()) x(i) *= by;
//!     }"#, "scale");
//!
//! let function = SCALE.function(device_id)?;
//! // SAFETY (all three): `stream` is a live stream of the device.
//! let x = unsafe { array.device_indexer_on(stream) }?;        // ordered after amso's work on it
//! let config = LaunchConfig::for_num_elems(x.size() as u32);
//! unsafe { with_stream(device_id, stream, |s| s.launch_builder(&function).arg(&x).arg(&2.0f64).launch(config)) }?;
//! unsafe { array.record_work(stream) }?;                       // amso's later work waits for it
//! ```

use std::sync::Arc;

pub use cudarc::driver::{CudaFunction, CudaStream, DriverError, LaunchConfig, PushKernelArg};

use super::context::Current;
use super::driver::cuda_error;
use super::stream::StreamHandle;
use crate::device::DeviceId;
use crate::error::Result;

/// A kernel's CUDA C++ source and entry point, compiled on first use on each device.
#[derive(Debug, Clone)]
pub struct Kernel {
    source: std::borrow::Cow<'static, str>,
    name: std::borrow::Cow<'static, str>,
    options: Vec<String>,
}

impl Kernel {
    /// The kernel `name` (an `extern "C" __global__` function) of `source`.
    pub const fn new(source: &'static str, name: &'static str) -> Kernel {
        Kernel {
            source: std::borrow::Cow::Borrowed(source),
            name: std::borrow::Cow::Borrowed(name),
            options: Vec::new(),
        }
    }

    /// A kernel from owned text (a source built at run time).
    pub fn from_source(source: impl Into<String>, name: impl Into<String>) -> Kernel {
        Kernel { source: source.into().into(), name: name.into().into(), options: Vec::new() }
    }

    /// The same kernel compiled with extra NVRTC options (`-DWIDTH=4`, `--use_fast_math`).
    pub fn with_options(mut self, options: impl IntoIterator<Item = impl Into<String>>) -> Kernel {
        self.options = options.into_iter().map(Into::into).collect();
        self
    }

    /// The entry point's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel compiled for `device_id` (NVRTC, cached); a compile error carries NVRTC's log.
    pub fn function(&self, device_id: DeviceId) -> Result<Arc<CudaFunction>> {
        super::compile::function(&self.source, &self.name, &self.options, device_id)
    }
}

/// Run `launch` with `stream` of `device_id` as cudarc's stream, with the device's context current and the caller's context
/// restored afterwards. The stream is lent for the call only. `launch` runs with the GIL
/// released, as every driver call amso makes does, hence `Send`: it takes no Python object.
///
/// # Safety
/// `stream` is a default stream or a live stream of `device_id` (the driver dereferences
/// handles): a typed argument's `stream()`, a `NewArray::stream()`, or a handle its owner keeps
/// alive.
pub unsafe fn with_stream<R: Send>(
    device_id: DeviceId,
    stream: crate::stream::Stream,
    launch: impl FnOnce(&CudaStream) -> std::result::Result<R, DriverError> + Send,
) -> Result<R> {
    crate::gil::released(|| {
        let _ctx = Current::enter(device_id)?;
        let stream = StreamHandle::of(stream)?;
        stream.check(device_id)?;
        let borrowed = stream.borrow(device_id)?;
        launch(&borrowed).map_err(cuda_error("cuLaunchKernel"))
    })
}

/// Make work queued later on stream `later` wait for the work queued so far on `earlier`
/// (device `device_id`), without blocking the host: for arguments that arrived on different
/// streams.
///
/// # Safety
/// Both are default streams or live streams of `device_id` (as for `with_stream`).
pub unsafe fn order_streams(
    device_id: DeviceId,
    earlier: crate::stream::Stream,
    later: crate::stream::Stream,
) -> Result<()> {
    let (earlier, later) = (StreamHandle::of(earlier)?, StreamHandle::of(later)?);
    super::stream::order(device_id, earlier, later.check(device_id)?)
}
