use super::*;
use crate::memarray::MemArray;
use crate::object::ArrayObject;
use std::sync::Arc;

fn plan<T: crate::element::Element, const N: usize>(a: &MemArray<T, N>) -> ExportPlan {
    plan_export(a.device(), a.pinned(), &DlpackRequest::default()).unwrap()
}

fn copy_plan<T: crate::element::Element, const N: usize>(a: &MemArray<T, N>) -> ExportPlan {
    plan_export(a.device(), a.pinned(), &DlpackRequest { copy: Some(true), ..Default::default() }).unwrap()
}

fn request(max_version: Option<(u32, u32)>) -> DlpackRequest {
    DlpackRequest { max_version, ..Default::default() }
}

#[test]
fn capsule_kind_follows_max_version() {
    assert_eq!(plan_export(Device::CPU, false, &request(None)).unwrap().format, Format::Legacy);
    assert_eq!(plan_export(Device::CPU, false, &request(Some((0, 8)))).unwrap().format, Format::Legacy);
    assert_eq!(
        plan_export(Device::CPU, false, &request(Some((1, 0)))).unwrap().format,
        Format::Versioned(DLPackVersion { major: 1, minor: 0 })
    );
    assert_eq!(
        plan_export(Device::CPU, false, &request(Some((2, 5)))).unwrap().format,
        Format::Versioned(DLPackVersion { major: 1, minor: DLPACK_VERSION.1 })
    );
}

#[test]
fn device_copy_and_stream_rules_on_the_host() {
    let cpu = Device::CPU;
    let with = |dl_device, copy, stream| DlpackRequest { stream, max_version: Some((1, 3)), dl_device, copy };
    let plan = |request| plan_export(cpu, false, &request);
    assert!(plan(with(Some((1, 0)), Some(false), None)).is_ok());
    assert!(plan(with(None, Some(true), None)).unwrap().copy);
    assert!(matches!(plan(with(Some((1, 3)), None, None)), Err(Error::ExportRefused(_))));
    assert!(matches!(plan(with(Some((8, 0)), None, None)), Err(Error::ExportRefused(_))));
    let refused = plan(with(Some((2, 0)), Some(false), None)).unwrap_err();
    assert!(matches!(refused, Error::ExportRefused(ref m) if m.contains("copy=False")), "{refused}");
    let to_gpu = plan(with(Some((2, 0)), None, Some(7))).unwrap();
    assert_eq!((to_gpu.copy, to_gpu.target, to_gpu.consumer_stream), (true, Device::cuda(DeviceId::ZERO), None));
    // Device 1: the plan's target where this machine has it (always without a driver, which
    // checks no range), a BufferError where it does not.
    match (DeviceId::new(1), plan(with(Some((2, 1)), None, None))) {
        (Ok(one), Ok(to_one)) => assert_eq!((to_one.copy, to_one.target), (true, Device::cuda(one))),
        (Err(_), Err(refused)) => assert!(matches!(refused, Error::ExportRefused(ref m) if m.contains("(2, 1)"))),
        (id, planned) => panic!("device 1 is {id:?}, and its plan {planned:?}"),
    }
    let negative = plan(with(Some((2, -1)), None, None)).unwrap_err();
    assert!(
        matches!(negative, Error::ExportRefused(ref m) if m.contains("dl_device=(2, -1): device_id must be >= 0")),
        "{negative}"
    );
    assert!(plan(with(None, None, Some(-1))).is_ok());
    assert!(matches!(plan(with(None, None, Some(0))), Err(Error::InvalidArgument(_))));
    assert!(matches!(plan(with(None, None, Some(-7))), Err(Error::InvalidArgument(_))));
    // kDLCUDAHost: only for pinned host arrays, and without a copy.
    assert!(matches!(plan(with(Some((3, 0)), None, None)), Err(Error::ExportRefused(_))));
    let pinned = plan_export(cpu, true, &with(Some((3, 0)), Some(false), None)).unwrap();
    assert_eq!((pinned.copy, pinned.target.device_type), (false, DeviceType::CudaHost));
}

#[test]
fn device_stream_handshake_values() {
    let gpu = Device::cuda(DeviceId::ZERO);
    let stream =
        |s| plan_export(gpu, false, &DlpackRequest { stream: s, ..Default::default() }).unwrap().consumer_stream;
    assert_eq!(stream(None), Some(1), "None means the legacy default stream");
    assert_eq!(stream(Some(0)), Some(1), "0 is treated as the legacy default stream, as CuPy does");
    assert_eq!(stream(Some(-1)), None, "-1: no synchronisation");
    assert_eq!(stream(Some(2)), Some(2));
    assert_eq!(stream(Some(0x5555)), Some(0x5555));
    let to_host = plan_export(gpu, false, &DlpackRequest { dl_device: Some((1, 0)), ..Default::default() }).unwrap();
    assert_eq!((to_host.copy, to_host.target, to_host.consumer_stream), (true, Device::CPU, None));
}

#[test]
fn managed_tensor_describes_the_array_and_holds_it() {
    let mut a = MemArray::<i16, 2>::new([2, 3]).unwrap();
    a.write([1, 2], 42).unwrap();
    let source = a.export_source(&plan(&a), None).unwrap();
    let owner = Arc::clone(a.core().host_buffer());
    let tensor = ManagedTensor::new(source, Format::Versioned(DLPackVersion { major: 1, minor: 3 }));
    let RawManaged::Versioned(ptr) = tensor.into_raw() else { panic!("asked for versioned") };
    // SAFETY: the pointer is live until the deleter below.
    unsafe {
        let m = &*ptr.as_ptr();
        let t = &m.dl_tensor;
        assert_eq!((t.ndim, *t.shape, *t.shape.add(1)), (2, 2, 3));
        assert_eq!((*t.strides, *t.strides.add(1)), (3, 1));
        assert_eq!((t.dtype.code.0, t.dtype.bits, t.dtype.lanes), (0, 16, 1));
        assert_eq!(*(t.data as *const i16).add(5), 42, "zero-copy: the export sees the array's data");
        assert_eq!(m.flags, DlpackFlags::empty());
        assert_eq!(m.manager_ctx, ptr.as_ptr().cast());
        assert_eq!(Arc::strong_count(&owner), 3, "array + export + this test");
        call_deleter(RawManaged::Versioned(ptr));
    }
    assert_eq!(Arc::strong_count(&owner), 2, "the deleter released the export's hold");
}

#[test]
fn export_outlives_the_array_and_copies_are_private() {
    let mut a = MemArray::<f64, 1>::from_slice([3], &[1.0, 2.0, 3.0]).unwrap();
    let copy = ManagedTensor::new(
        a.export_source(&copy_plan(&a), None).unwrap(),
        Format::Versioned(DLPackVersion { major: 1, minor: 3 }),
    );
    let view = ManagedTensor::new(a.export_source(&plan(&a), None).unwrap(), Format::Legacy);
    a.write([0], 10.0).unwrap();
    drop(a);
    let (RawManaged::Versioned(c), RawManaged::Legacy(v)) = (copy.into_raw(), view.into_raw()) else { panic!() };
    // SAFETY: both tensors are live until their deleters run below.
    unsafe {
        assert_eq!(*((*v.as_ptr()).dl_tensor.data as *const f64), 10.0);
        assert_eq!(*((*c.as_ptr()).dl_tensor.data as *const f64), 1.0);
        assert_eq!((*c.as_ptr()).flags, DlpackFlags::IS_COPIED);
        call_deleter(RawManaged::Legacy(v));
        call_deleter(RawManaged::Versioned(c));
    }
}

#[test]
fn readonly_flag_and_locked_export() {
    let a = MemArray::<u8, 1>::with_options(
        [4],
        crate::memarray::options::ArrayOptions { readonly: true, ..Default::default() },
    )
    .unwrap();
    let tensor = ManagedTensor::new(
        a.export_source(&plan(&a), None).unwrap(),
        Format::Versioned(DLPackVersion { major: 1, minor: 3 }),
    );
    let RawManaged::Versioned(p) = tensor.raw else { panic!() };
    // SAFETY: `tensor` still owns the live pointer.
    assert_eq!(unsafe { (*p.as_ptr()).flags }, DlpackFlags::READ_ONLY);
    drop(tensor);
    let mut b = MemArray::<u8, 1>::new([4]).unwrap();
    let id = crate::lock::LockId::next();
    b.enter(id).unwrap();
    assert!(matches!(b.export_source(&plan(&b), None), Err(Error::Locked { .. })));
    assert!(b.export_source(&plan(&b), Some(id)).is_ok());
}

/// An owner whose drop records that it ran and then panics: an internal error in Rust code that
/// a release runs.
struct PanicsOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        panic!("forced internal error in an export's owner");
    }
}

/// A host export of no float32 elements, held by `owner`, as a raw tensor to delete.
fn empty_export(owner: Owner, format: Format) -> RawManaged {
    let source = ExportSource {
        data: std::ptr::null_mut(),
        device: Device::CPU,
        dtype: <f32 as crate::element::ArrayElement>::DTYPE.dl_data_type(),
        shape: &[0],
        strides: None,
        owner,
        readonly: false,
        copied: false,
    };
    ManagedTensor::new(source, format).into_raw()
}

#[test]
fn a_panic_while_freeing_an_export_stays_inside_the_deleter() {
    // The deleter runs in the consumer's C code; an internal error there (here, an owner
    // whose drop panics) must not unwind into it.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // keep the test output quiet
    for format in [Format::Legacy, Format::Versioned(DLPackVersion { major: 1, minor: 3 })] {
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let raw = empty_export(std::sync::Arc::new(PanicsOnDrop(dropped.clone())).into(), format);
        let address = |raw: &RawManaged| match raw {
            RawManaged::Legacy(p) => p.as_ptr() as usize,
            RawManaged::Versioned(p) => p.as_ptr() as usize,
        };
        let block = address(&raw);
        // SAFETY: a live tensor whose deleter has not run; called the way a consumer would.
        let outcome = std::panic::catch_unwind(|| unsafe { call_deleter(raw) });
        assert!(outcome.is_ok(), "the deleter let a panic escape");
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst), "the owner's drop ran");
        // The block came back before the owner's drop panicked: this thread's next export has it.
        let next = empty_export(std::sync::Arc::new(()).into(), format);
        assert_eq!(address(&next), block, "the panicking owner's block was lost");
        // SAFETY: as above.
        unsafe { call_deleter(next) };
    }
    std::panic::set_hook(previous);
}

#[cfg(feature = "python")]
#[test]
fn a_panic_while_a_capsule_releases_the_last_reference_stays_inside() {
    // A capsule destroyed unconsumed after its array went drops the buffer's last reference,
    // and with it a foreign buffer's owner: Rust code of a user's, which must not unwind out of
    // the capsule's destructor.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // keep the test output quiet
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut memory = [0u8; 8];
    // SAFETY: 8 bytes that outlive the buffer; the owner is dropped with it.
    let buffer = Arc::new(unsafe {
        crate::host::HostBuffer::foreign(memory.as_mut_ptr(), 8, Box::new(PanicsOnDrop(dropped.clone())))
    });
    let hub = export_hub::ExportHub::new(buffer.clone());
    // SAFETY: this thread stands for the GIL's holder; the hub is the array's current one.
    let export = unsafe { export_hub::ExportHub::acquire(hub) };
    let source = ExportSource {
        data: memory.as_mut_ptr().cast(),
        device: Device::CPU,
        dtype: <u8 as crate::element::ArrayElement>::DTYPE.dl_data_type(),
        shape: &[8],
        strides: None,
        owner: Owner::Hub(export),
        readonly: false,
        copied: false,
    };
    let raw = ManagedTensor::new(source, Format::Legacy).into_raw();
    drop(buffer);
    // SAFETY: the array goes: its reference is given up once.
    unsafe { export_hub::ExportHub::merge(hub) };
    assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst), "the export still holds the buffer");
    // SAFETY: a live tensor nobody consumed, released once, on "the GIL's" thread.
    let outcome = std::panic::catch_unwind(|| unsafe { release_attached(raw) });
    std::panic::set_hook(previous);
    assert!(outcome.is_ok(), "the release let a panic escape");
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst), "the owner's drop ran");
}
