//! What a `MemArray` hands to DLPack for an `ExportPlan`: its own memory (held through `Arc`,
//! after the consumer's stream was made to wait for pending work), or a private copy on the
//! device the consumer asked for.

use std::any::Any;
use std::sync::Arc;

use crate::dlpack::{ExportPlan, ExportSource};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::lock::{check_access, LockId};
#[cfg(feature = "cuda")]
use crate::memarray::Device;
use crate::memarray::{DeviceType, MemArray, Residence};
use crate::MAX_NDIM;

impl<T: Element, const N: usize> MemArray<T, N> {
    /// Describe the data for the export `plan`, presenting `lock`.
    pub fn export_source(&self, plan: &ExportPlan, lock: Option<LockId>) -> Result<ExportSource> {
        check_access(self.lock_id(), lock)?;
        let (data, owner, copied): (*mut u8, Arc<dyn Any + Send + Sync>, bool) =
            match (self.residence(), plan.target.device_type) {
                (Residence::Host, DeviceType::Cpu | DeviceType::CudaHost) => {
                    let buffer = if plan.copy {
                        Arc::new(self.host_buffer().try_clone()?)
                    } else {
                        Arc::clone(self.host_buffer())
                    };
                    (buffer.as_ptr().cast(), buffer, plan.copy)
                }
                #[cfg(feature = "cuda")]
                (Residence::Device, DeviceType::Cuda) if plan.target.id == self.device_id() => {
                    let side = self.device_side();
                    if let Some(stream) = plan.consumer_stream {
                        side.hand_to(self.device_id(), crate::cuda::stream::StreamHandle::from_int(stream)?)?;
                    }
                    let memory = if plan.copy {
                        side.duplicate(self.device_id())?
                    } else {
                        Arc::clone(side.memory().expect("resident"))
                    };
                    (memory.ptr() as usize as *mut u8, memory, plan.copy)
                }
                #[cfg(feature = "cuda")]
                _ => self.copy_to_device(plan.target)?,
                #[cfg(not(feature = "cuda"))]
                _ => {
                    return Err(Error::ExportRefused(format!(
                        "exporting to dl_device=({}, {}) needs amso's CUDA layer, which this build does not include",
                        plan.target.device_type as i32, plan.target.id
                    )))
                }
            };
        let mut shape = [0i64; MAX_NDIM];
        for (slot, &d) in shape.iter_mut().zip(self.shape()) {
            *slot = d as i64;
        }
        Ok(ExportSource {
            data: data.cast(),
            device: plan.target,
            dtype: T::DTYPE.dl_data_type(),
            ndim: N,
            shape,
            owner,
            readonly: self.readonly() && !copied,
            copied,
        })
    }

    /// A private copy of the current data on `target` (another device, or the host),
    /// complete when this returns.
    #[cfg(feature = "cuda")]
    fn copy_to_device(&self, target: Device) -> Result<(*mut u8, Arc<dyn Any + Send + Sync>, bool)> {
        use crate::cuda::{memory::DeviceMemory, stream, transfer};
        use crate::host::HostBuffer;
        let bytes = self.nbytes();
        match (self.residence(), target.device_type) {
            (Residence::Device, DeviceType::Cpu) => {
                let buffer = Arc::new(HostBuffer::<T>::zeroed(self.size())?);
                let side = self.device_side();
                let source = side.memory().expect("resident").ptr();
                // SAFETY: both hold `bytes`; ordered after the array's last work; pageable
                // destinations are complete on return.
                unsafe {
                    transfer::device_to_host(
                        self.device_id(),
                        buffer.as_ptr().cast(),
                        source,
                        bytes,
                        false,
                        side.stream(),
                    )
                }?;
                Ok((buffer.as_ptr().cast(), buffer, true))
            }
            (residence, DeviceType::Cuda) => {
                crate::cuda::driver::check_device(target.id)?;
                let memory = Arc::new(DeviceMemory::alloc(target.id, bytes)?);
                let own = stream::amso_stream(target.id)?;
                if residence == Residence::Host {
                    // SAFETY: both hold `bytes`; synchronised below before the host buffer can change.
                    unsafe {
                        transfer::host_to_device(
                            target.id,
                            memory.ptr(),
                            self.host_buffer().as_ptr().cast(),
                            bytes,
                            self.pinned(),
                            own,
                        )
                    }?;
                } else {
                    let side = self.device_side();
                    stream::synchronize(self.device_id(), side.stream())?;
                    // SAFETY: both hold `bytes`; the source's earlier work is complete.
                    unsafe {
                        transfer::device_to_device(
                            target.id,
                            memory.ptr(),
                            side.memory().expect("resident").ptr(),
                            bytes,
                            own,
                        )
                    }?;
                }
                stream::synchronize(target.id, own)?;
                memory.mark_shared();
                Ok((memory.ptr() as usize as *mut u8, memory, true))
            }
            _ => Err(Error::ExportRefused(format!(
                "cannot export {:?} data to dl_device=({}, {})",
                self.device(),
                target.device_type as i32,
                target.id
            ))),
        }
    }
}
