//! Where data lives and where its work is queued: DLPack device types, a device (type and
//! ordinal), an array's residence (host buffer or device memory), and a CUDA stream.

use crate::error::{Error, Result};

/// DLPack device types amso handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DeviceType {
    /// Host memory (`kDLCPU`).
    Cpu = 1,
    /// CUDA device memory (`kDLCUDA`).
    Cuda = 2,
    /// Pinned host memory registered with CUDA (`kDLCUDAHost`); only as an export target.
    CudaHost = 3,
    /// CUDA managed memory (`kDLCUDAManaged`): device memory the host may also read and write
    /// in place once the device's work on it is done. Arrays over it live on the device
    /// (`Device::cuda`) and say `kDLCUDAManaged` at the DLPack boundary.
    CudaManaged = 13,
}

impl DeviceType {
    /// The device type for a DLPack code; other codes are `UnsupportedDevice`.
    pub fn from_code(code: i32) -> Result<DeviceType> {
        match code {
            1 => Ok(DeviceType::Cpu),
            2 => Ok(DeviceType::Cuda),
            3 => Ok(DeviceType::CudaHost),
            13 => Ok(DeviceType::CudaManaged),
            other => Err(Error::UnsupportedDevice(other)),
        }
    }
}

/// A DLPack device: type and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    /// Host or CUDA.
    pub device_type: DeviceType,
    /// Device ordinal (0 for the host).
    pub id: DeviceId,
}

impl Device {
    /// The host.
    pub const CPU: Device = Device { device_type: DeviceType::Cpu, id: DeviceId::ZERO };

    /// CUDA device `id`.
    pub const fn cuda(id: DeviceId) -> Device {
        Device { device_type: DeviceType::Cuda, id }
    }

    /// `(device type, device id)` as DLPack codes, as `__dlpack_device__` reports them.
    pub const fn dlpack_codes(self) -> (i32, i32) {
        (self.device_type as i32, self.id.ordinal())
    }
}

/// A CUDA device ordinal, checked where it entered amso (from Python, C or a foreign array)
/// and passed on as this type: never negative, and below the device count when a driver is
/// loaded. Host arrays carry one too (the device they move to, 0 by default).
///
/// An `i32` in memory (`repr(transparent)`), so the tables amso's copies in one process share
/// (the pool, the array header) pass it as it is: each copy made its ids with `new`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct DeviceId(i32);

impl DeviceId {
    /// Device 0, every array's device unless it asks for another.
    pub const ZERO: DeviceId = DeviceId(0);

    /// Check `id`: refused when negative, or (with a CUDA driver loaded) when this machine has
    /// no such device. Without a driver any non-negative id passes, and work on the device is
    /// refused later for want of the driver.
    #[inline]
    pub fn new(id: i32) -> Result<DeviceId> {
        // The common case, on every plug-in's allocation and free: a device of the loaded
        // driver, known from one read.
        #[cfg(feature = "cuda")]
        if id >= 0 && crate::cuda::driver::loaded_device_count().is_some_and(|count| id < count) {
            return Ok(DeviceId(id));
        }
        DeviceId::checked(id)
    }

    /// `new` beyond its common case.
    #[cold]
    fn checked(id: i32) -> Result<DeviceId> {
        if id < 0 {
            return Err(Error::InvalidArgument(format!("device_id must be >= 0, got {id}")));
        }
        #[cfg(feature = "cuda")]
        {
            if crate::cuda::driver::is_available() {
                crate::cuda::driver::check_device(id)?;
            }
        }
        Ok(DeviceId(id))
    }

    /// An ordinal the driver gave (a pointer's device, an index below the device count).
    #[cfg(feature = "cuda")]
    pub(crate) const fn from_driver(ordinal: i32) -> DeviceId {
        DeviceId(ordinal)
    }

    /// `id` if it names one of `count` devices (a pickle's id, against the count the caller
    /// read from the driver).
    pub(crate) fn among(id: i32, count: i32) -> Option<DeviceId> {
        (0..count).contains(&id).then_some(DeviceId(id))
    }

    /// The ordinal, for the driver and the protocols.
    pub const fn ordinal(self) -> i32 {
        self.0
    }

    /// The ordinal as a table index.
    #[cfg(feature = "cuda")]
    pub(crate) const fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Where an array's current data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residence {
    /// In the host buffer.
    Host,
    /// In the device buffer of the array's device id.
    Device,
}

impl Residence {
    /// The device holding data that resides here, for an array on CUDA device `device_id`.
    pub fn device(self, device_id: DeviceId) -> Device {
        match self {
            Residence::Host => Device::CPU,
            Residence::Device => Device::cuda(device_id),
        }
    }

    /// Refuse host access to data that is not on the host, saying how to bring it there.
    pub(crate) fn host_only(self) -> Result<()> {
        match self {
            Residence::Host => Ok(()),
            Residence::Device => Err(Error::Unavailable(
                "the data is in device memory; move_memory(kDLCPU) first to touch it from the host".into(),
            )),
        }
    }
}
