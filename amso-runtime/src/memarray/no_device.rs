//! The device side of a `MemArray` in a build without amso's CUDA layer: the same API as
//! `device_side.rs`, where nothing ever lives on a device. A request that needs a device is
//! refused with what the build lacks; the rest has nothing to do. `ArrayCore` calls it
//! without `cfg` switches.

use crate::device::{DeviceId, Residence};

use crate::error::{Error, Result};
use crate::host::HostEnd;
use crate::stream::Stream;

/// No device memory, and no stream.
#[derive(Debug, Default)]
pub(crate) struct DeviceSide;

/// The refusal of a request that needs the CUDA layer.
fn unavailable(what: &str) -> Error {
    Error::Unavailable(format!("{what} needs amso's CUDA layer, which this build does not include"))
}

impl DeviceSide {
    /// A new array's start: on the host (`ArrayOptions::check` refused device memory).
    pub(crate) fn start(
        &mut self,
        _options: &crate::memarray::options::ArrayOptions,
        _bytes: usize,
    ) -> Result<Residence> {
        Ok(Residence::Host)
    }

    /// A copy to or from the device: refused.
    ///
    /// # Safety
    /// None needed here; the signature is `device_side.rs`'s.
    pub(crate) unsafe fn copy(
        &mut self,
        _device_id: DeviceId,
        _host: HostEnd,
        _bytes: usize,
        _pinned: bool,
        _stream: Stream,
        _synchronize: bool,
    ) -> Result<()> {
        Err(unavailable("moving to kDLCUDA"))
    }

    /// A move between devices: refused.
    pub(crate) fn change_device(&mut self, _from: DeviceId, _to: DeviceId, _bytes: usize, _s: Stream) -> Result<()> {
        Err(unavailable("moving to kDLCUDA"))
    }

    /// A copy of device data: there is none.
    pub(crate) fn duplicate(&self, _device_id: DeviceId) -> Result<DeviceSide> {
        Err(unavailable("copying device data"))
    }

    /// The MemArray design's kernel: refused.
    #[cfg(feature = "python")]
    pub(crate) fn add_index(
        &mut self,
        _device_id: DeviceId,
        _dtype: &crate::element::DType,
        _shape: &[usize],
        _s: Stream,
    ) -> Result<()> {
        Err(unavailable("add_index_tuple"))
    }

    /// Work noted on a stream: none can run.
    #[cfg(feature = "python")]
    pub(crate) fn record_work(&mut self, _device_id: DeviceId, _stream: Stream) -> Result<()> {
        Ok(())
    }

    /// The stream of the last work: the legacy default stream.
    pub(crate) fn last_stream(&self) -> Stream {
        Stream::LEGACY
    }

    /// Exports holding device memory: none.
    pub(crate) fn export_holders(&self) -> usize {
        0
    }
}
