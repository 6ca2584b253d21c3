//! `ArrayOptions`: how an array is made (pinned, on the device, managed, shareable), checked
//! once for every instantiation.

use crate::device::DeviceId;
#[cfg(not(feature = "cuda"))]
use crate::error::Error;
use crate::error::Result;

/// Construction options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrayOptions {
    /// The CUDA device the array moves to (0 by default).
    pub device_id: DeviceId,
    /// Refuse writes (and export with DLPack's READ_ONLY flag).
    pub readonly: bool,
    /// Allocate the host buffer in page-locked memory (fast, asynchronous transfers).
    pub pinned: bool,
    /// Start on the device (device memory of `device_id`) instead of the host.
    pub on_device: bool,
    /// Leave new device memory uninitialised (`amso.empty`); host memory is always zeroed.
    pub uninitialized: bool,
    /// Start on the device in CUDA managed memory (`cuMemAllocManaged`), which the host reads
    /// and writes in place once the device's work is done; exported as kDLCUDAManaged.
    pub managed: bool,
    /// Start on the device in memory other processes can map (`cuMemAlloc`), so that
    /// `share()` can hand it to them without a copy.
    pub shareable: bool,
}

impl ArrayOptions {
    /// Refuse options no array can have (written once, not per instantiation).
    pub(crate) fn check(&self) -> Result<()> {
        #[cfg(not(feature = "cuda"))]
        if self.pinned || self.on_device || self.managed || self.shareable {
            return Err(Error::Unavailable(format!(
                "{} needs amso's CUDA layer, which this build does not include",
                if self.pinned {
                    "pinned memory"
                } else if self.managed {
                    "managed=True"
                } else if self.shareable {
                    "shareable=True"
                } else {
                    "on_device=True"
                }
            )));
        }
        Ok(())
    }
}
