//! What a `MemArray` hands to DLPack for an `ExportPlan`: its own memory (held through `Arc`,
//! after the consumer's stream was made to wait for pending work), or a private copy on the
//! device the consumer asked for. Written once, over the untyped array.

use std::sync::Arc;

#[cfg(feature = "cuda")]
use super::access::RawView;
use super::core::ArrayCore;
use crate::device::{Device, DeviceType, Residence};
use crate::dlpack::{ExportPlan, ExportSource, Owner};
use crate::error::{Error, Result};
use crate::lock::{check_access, LockId};

impl ArrayCore {
    /// Describe the data for the export `plan`, presenting `lock`.
    #[inline]
    pub(crate) fn export_source(&self, plan: &ExportPlan, lock: Option<LockId>) -> Result<ExportSource<'_>> {
        self.export_source_with(plan, lock, Owner::own)
    }

    /// `export_source`, with host memory exported where it is held by `host_owner`'s `Owner`
    /// (a Python array's hub: `dlpack::export_hub`).
    #[inline]
    pub(crate) fn export_source_with(
        &self,
        plan: &ExportPlan,
        lock: Option<LockId>,
        host_owner: impl FnOnce(&Arc<crate::host::HostBuffer>) -> Owner,
    ) -> Result<ExportSource<'_>> {
        let raw = self.raw_view();
        check_access(raw.holder, lock)?;
        if raw.dtype.is_record() {
            return Err(Error::ExportRefused(record_refusal(raw.dtype)));
        }
        let (data, owner, copied): (*mut u8, Owner, bool) = match (raw.residence, plan.target.device_type) {
            (Residence::Host, DeviceType::Cpu | DeviceType::CudaHost) => match plan.copy {
                true => {
                    let buffer = Arc::new(self.host_buffer().try_clone()?);
                    (buffer.as_ptr(), buffer.into(), true)
                }
                false => (self.host_buffer().as_ptr(), host_owner(self.host_buffer()), false),
            },
            #[cfg(feature = "cuda")]
            (Residence::Device, DeviceType::Cuda) if plan.target.id == raw.device_id => {
                if let Some(stream) = plan.consumer_stream {
                    raw.device.hand_to(
                        raw.device_id,
                        crate::cuda::stream::StreamHandle::of(crate::stream::Stream::reported(stream))?,
                    )?;
                }
                let memory = if plan.copy {
                    raw.device.duplicate_memory(raw.device_id)?
                } else {
                    Arc::clone(raw.device.memory().expect("resident"))
                };
                memory.mark_shared();
                (memory.ptr() as usize as *mut u8, memory.into(), plan.copy)
            }
            #[cfg(feature = "cuda")]
            _ => copy_to_device(&raw, plan.target)?,
            #[cfg(not(feature = "cuda"))]
            _ => {
                return Err(Error::ExportRefused(format!(
                    "exporting to dl_device=({}, {}) needs amso's CUDA layer, which this build does not include",
                    plan.target.device_type as i32, plan.target.id
                )))
            }
        };
        // Managed memory is exported as what it is (kDLCUDAManaged); a copy of it is not.
        let managed = raw.managed() && !copied && plan.target.device_type == DeviceType::Cuda;
        let device = if managed { Device { device_type: DeviceType::CudaManaged, ..plan.target } } else { plan.target };
        Ok(ExportSource {
            data: data.cast(),
            device,
            dtype: raw.dtype.dl_data_type(),
            shape: self.shape(),
            strides: None,
            owner,
            readonly: raw.readonly && !copied,
            copied,
        })
    }
}

/// Why a record array has no DLPack export, and what to export instead.
pub(crate) fn record_refusal(dtype: &crate::element::DType) -> String {
    let views: Vec<String> = dtype.fields.iter().map(|f| format!("a[{:?}]", f.name)).collect();
    format!(
        "{} is a record (C struct) element type, and DLPack has no record type: export a field instead ({}: NumPy \
         views of this memory, without a copy, which DLPack consumers take), or read the records through \
         np.asarray(a), a structured NumPy view",
        dtype.name,
        views.join(", ")
    )
}

/// What a typed argument holds of an array: a reference to its memory where it is now.
#[cfg(feature = "python")]
pub(crate) enum HeldMemory {
    /// The host buffer.
    Host(Arc<crate::host::HostBuffer>),
    /// The device memory.
    #[cfg(feature = "cuda")]
    Device(Arc<crate::cuda::device_memory::DeviceMemory>),
}

/// An array's memory held in place: what it holds, its first element, where it is, whether it
/// is read-only.
#[cfg(feature = "python")]
pub(crate) struct Held {
    pub(crate) memory: HeldMemory,
    pub(crate) data: usize,
    pub(crate) device: crate::device::Device,
    pub(crate) readonly: bool,
}

#[cfg(feature = "python")]
impl ArrayCore {
    /// Hold the data where it is, without a copy: what a typed argument reads. Device data is
    /// handed to `stream` (its pending work ordered first) and, as with any export, freed only
    /// after the device synchronises. A locked array is refused.
    #[inline]
    pub(crate) fn hold(&self, stream: crate::stream::Stream) -> Result<Held> {
        let raw = self.raw_view();
        check_access(raw.holder, None)?;
        let device = raw.device();
        match raw.residence {
            Residence::Host => {
                let buffer = Arc::clone(self.host_buffer());
                let data = buffer.as_ptr() as usize;
                Ok(Held { memory: HeldMemory::Host(buffer), data, device, readonly: raw.readonly })
            }
            #[cfg(feature = "cuda")]
            Residence::Device => {
                raw.device.hand_to(raw.device_id, crate::cuda::stream::StreamHandle::of(stream)?)?;
                let memory = Arc::clone(raw.device.memory().expect("resident"));
                memory.mark_shared();
                let data = memory.ptr() as usize;
                Ok(Held { memory: HeldMemory::Device(memory), data, device, readonly: raw.readonly })
            }
            #[cfg(not(feature = "cuda"))]
            Residence::Device => {
                let _ = stream;
                Err(Error::Unavailable("device memory needs amso's CUDA layer".into()))
            }
        }
    }
}

/// A private copy of the current data on `target` (another device, or the host), complete when
/// this returns.
#[cfg(feature = "cuda")]
fn copy_to_device(raw: &RawView<'_>, target: crate::device::Device) -> Result<(*mut u8, Owner, bool)> {
    use crate::cuda::{device_memory::DeviceMemory, stream, transfer};
    use crate::host::HostBuffer;
    use crate::host::HostEnd;
    let bytes = raw.nbytes;
    match (raw.residence, target.device_type) {
        (Residence::Device, DeviceType::Cpu) => {
            let buffer = Arc::new(HostBuffer::zeroed(bytes)?);
            let source = raw.device.memory().expect("resident").ptr();
            // SAFETY: both hold `bytes`; ordered after the array's last work; pageable
            // destinations are complete on return.
            unsafe {
                transfer::copy(
                    raw.device_id,
                    HostEnd::from_device(buffer.as_ptr()),
                    source,
                    bytes,
                    false,
                    raw.device.stream(),
                )
            }?;
            Ok((buffer.as_ptr(), buffer.into(), true))
        }
        (residence, DeviceType::Cuda) => {
            crate::cuda::driver::require()?;
            let memory = Arc::new(DeviceMemory::alloc(target.id, bytes)?);
            let own = stream::amso_stream(target.id)?;
            if residence == Residence::Host {
                // SAFETY: both hold `bytes`; synchronised below before the host buffer can change.
                unsafe {
                    transfer::copy(target.id, HostEnd::to_device(raw.host), memory.ptr(), bytes, raw.pinned, own)
                }?;
            } else {
                stream::synchronize(raw.device_id, raw.device.stream())?;
                // SAFETY: both hold `bytes`; the source's earlier work is complete.
                unsafe {
                    transfer::device_to_peer(
                        target.id,
                        memory.ptr(),
                        raw.device_id,
                        raw.device.memory().expect("resident").ptr(),
                        bytes,
                        own,
                    )
                }?;
            }
            stream::synchronize(target.id, own)?;
            memory.mark_shared();
            Ok((memory.ptr() as usize as *mut u8, memory.into(), true))
        }
        _ => Err(Error::ExportRefused(format!(
            "cannot export data in {:?} memory to dl_device=({}, {})",
            raw.residence, target.device_type as i32, target.id
        ))),
    }
}
