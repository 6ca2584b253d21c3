//! What a `MemArray` hands to DLPack for an `ExportPlan`: its own memory (held through `Arc`,
//! after the consumer's stream was made to wait for pending work), or a private copy on the
//! device the consumer asked for. The logic is written once, over a type-erased view of the
//! array; each instantiation only fills the view.

use std::any::Any;
use std::sync::Arc;

use super::access::RawView;
use crate::device::{DeviceType, Residence};
use crate::dlpack::{ExportPlan, ExportSource};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::lock::{check_access, LockId};
use crate::memarray::MemArray;

/// Owned memory and its first byte.
type Owned = (*mut u8, Arc<dyn Any + Send + Sync>);

/// Everything the export logic needs to know about one array.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
struct ExportView<'a, 'f> {
    raw: RawView<'a>,
    host_share: &'f dyn Fn() -> Arc<dyn Any + Send + Sync>,
    host_copy: &'f dyn Fn() -> Result<Owned>,
}

impl<T: Element, const N: usize> MemArray<T, N> {
    /// Describe the data for the export `plan`, presenting `lock`.
    pub(crate) fn export_source(&self, plan: &ExportPlan, lock: Option<LockId>) -> Result<ExportSource<'_>> {
        let buffer = self.host_buffer();
        let view = ExportView {
            raw: self.raw_view(),
            host_share: &|| Arc::clone(buffer) as Arc<dyn Any + Send + Sync>,
            host_copy: &|| {
                let copy = Arc::new(buffer.try_clone()?);
                Ok((copy.as_ptr().cast(), copy as Arc<dyn Any + Send + Sync>))
            },
        };
        export(&view, plan, lock)
    }
}

fn export<'a>(view: &ExportView<'a, '_>, plan: &ExportPlan, lock: Option<LockId>) -> Result<ExportSource<'a>> {
    check_access(view.raw.holder, lock)?;
    let (data, owner, copied): (*mut u8, Arc<dyn Any + Send + Sync>, bool) =
        match (view.raw.residence, plan.target.device_type) {
            (Residence::Host, DeviceType::Cpu | DeviceType::CudaHost) => {
                let (data, owner) = if plan.copy { (view.host_copy)()? } else { (view.raw.host, (view.host_share)()) };
                (data, owner, plan.copy)
            }
            #[cfg(feature = "cuda")]
            (Residence::Device, DeviceType::Cuda) if plan.target.id == view.raw.device_id => {
                if let Some(stream) = plan.consumer_stream {
                    view.raw
                        .device
                        .hand_to(view.raw.device_id, crate::cuda::stream::StreamHandle::from_int(stream)?)?;
                }
                let memory = if plan.copy {
                    view.raw.device.duplicate(view.raw.device_id)?
                } else {
                    Arc::clone(view.raw.device.memory().expect("resident"))
                };
                memory.mark_shared();
                (memory.ptr() as usize as *mut u8, memory, plan.copy)
            }
            #[cfg(feature = "cuda")]
            _ => copy_to_device(view, plan.target)?,
            #[cfg(not(feature = "cuda"))]
            _ => {
                return Err(Error::ExportRefused(format!(
                    "exporting to dl_device=({}, {}) needs amso's CUDA layer, which this build does not include",
                    plan.target.device_type as i32, plan.target.id
                )))
            }
        };
    Ok(ExportSource {
        data: data.cast(),
        device: plan.target,
        dtype: view.raw.dtype.dl_data_type(),
        shape: view.raw.shape,
        owner,
        readonly: view.raw.readonly && !copied,
        copied,
    })
}

/// A private copy of the current data on `target` (another device, or the host), complete when
/// this returns.
#[cfg(feature = "cuda")]
fn copy_to_device(
    view: &ExportView<'_, '_>,
    target: crate::device::Device,
) -> Result<(*mut u8, Arc<dyn Any + Send + Sync>, bool)> {
    use crate::cuda::{memory::DeviceMemory, stream, transfer};
    use crate::host::HostBuffer;
    let bytes = view.raw.nbytes;
    match (view.raw.residence, target.device_type) {
        (Residence::Device, DeviceType::Cpu) => {
            let buffer = Arc::new(HostBuffer::<u8>::zeroed(bytes)?);
            let source = view.raw.device.memory().expect("resident").ptr();
            // SAFETY: both hold `bytes`; ordered after the array's last work; pageable
            // destinations are complete on return.
            unsafe {
                transfer::device_to_host(
                    view.raw.device_id,
                    buffer.as_ptr(),
                    source,
                    bytes,
                    false,
                    view.raw.device.stream(),
                )
            }?;
            Ok((buffer.as_ptr(), buffer, true))
        }
        (residence, DeviceType::Cuda) => {
            crate::cuda::driver::check_device(target.id)?;
            let memory = Arc::new(DeviceMemory::alloc(target.id, bytes)?);
            let own = stream::amso_stream(target.id)?;
            if residence == Residence::Host {
                // SAFETY: both hold `bytes`; synchronised below before the host buffer can change.
                unsafe {
                    transfer::host_to_device(target.id, memory.ptr(), view.raw.host, bytes, view.raw.pinned, own)
                }?;
            } else {
                stream::synchronize(view.raw.device_id, view.raw.device.stream())?;
                // SAFETY: both hold `bytes`; the source's earlier work is complete.
                unsafe {
                    transfer::device_to_peer(
                        target.id,
                        memory.ptr(),
                        view.raw.device_id,
                        view.raw.device.memory().expect("resident").ptr(),
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
            "cannot export data in {:?} memory to dl_device=({}, {})",
            view.raw.residence, target.device_type as i32, target.id
        ))),
    }
}
