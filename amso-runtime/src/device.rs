//! Where data lives: DLPack device types, a device (type and ordinal), and an array's
//! residence (host buffer or device memory).

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
    pub fn from_dlpack(code: i32) -> Result<DeviceType> {
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
    pub id: i32,
}

impl Device {
    /// The host.
    pub const CPU: Device = Device { device_type: DeviceType::Cpu, id: 0 };

    /// CUDA device `id`.
    pub const fn cuda(id: i32) -> Device {
        Device { device_type: DeviceType::Cuda, id }
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
    pub fn device(self, device_id: i32) -> Device {
        match self {
            Residence::Host => Device::CPU,
            Residence::Device => Device { device_type: DeviceType::Cuda, id: device_id },
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
