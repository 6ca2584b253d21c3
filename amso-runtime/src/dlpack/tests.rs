use super::*;
use crate::object::ArrayObject;
use crate::MemArray;

fn request(max_version: Option<(u32, u32)>) -> DlpackRequest {
    DlpackRequest { max_version, ..Default::default() }
}

#[test]
fn capsule_kind_follows_max_version() {
    assert_eq!(plan_export(Device::CPU, &request(None)).unwrap().format, Format::Legacy);
    assert_eq!(plan_export(Device::CPU, &request(Some((0, 8)))).unwrap().format, Format::Legacy);
    assert_eq!(
        plan_export(Device::CPU, &request(Some((1, 0)))).unwrap().format,
        Format::Versioned(DLPackVersion { major: 1, minor: 0 })
    );
    assert_eq!(
        plan_export(Device::CPU, &request(Some((2, 5)))).unwrap().format,
        Format::Versioned(DLPackVersion { major: 1, minor: DLPACK_VERSION.1 })
    );
}

#[test]
fn device_copy_and_stream_rules_on_the_host() {
    let cpu = Device::CPU;
    let with = |dl_device, copy, stream| DlpackRequest { stream, max_version: Some((1, 3)), dl_device, copy };
    assert!(plan_export(cpu, &with(Some((1, 0)), Some(false), None)).is_ok());
    assert!(plan_export(cpu, &with(None, Some(true), None)).unwrap().copy);
    assert!(matches!(plan_export(cpu, &with(Some((1, 3)), None, None)), Err(Error::ExportRefused(_))));
    assert!(matches!(plan_export(cpu, &with(Some((8, 0)), None, None)), Err(Error::ExportRefused(_))));
    let refused = plan_export(cpu, &with(Some((2, 0)), Some(false), None)).unwrap_err();
    assert!(matches!(refused, Error::ExportRefused(ref m) if m.contains("copy=False")), "{refused}");
    assert!(plan_export(cpu, &with(None, None, Some(-1))).is_ok());
    assert!(matches!(plan_export(cpu, &with(None, None, Some(0))), Err(Error::InvalidArgument(_))));
}

#[test]
fn managed_tensor_describes_the_array_and_holds_it() {
    let mut a = MemArray::<i16, 2>::new([2, 3]).unwrap();
    a.write([1, 2], 42, None).unwrap();
    let source = a.export_source(false, None).unwrap();
    let owner = Arc::clone(&source.owner);
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
        a.export_source(true, None).unwrap(),
        Format::Versioned(DLPackVersion { major: 1, minor: 3 }),
    );
    let view = ManagedTensor::new(a.export_source(false, None).unwrap(), Format::Legacy);
    a.write([0], 10.0, None).unwrap();
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
    let a = MemArray::<u8, 1>::with_options([4], crate::ArrayOptions { device_id: 0, readonly: true }).unwrap();
    let tensor = ManagedTensor::new(
        a.export_source(false, None).unwrap(),
        Format::Versioned(DLPackVersion { major: 1, minor: 3 }),
    );
    let RawManaged::Versioned(p) = tensor.raw else { panic!() };
    // SAFETY: `tensor` still owns the live pointer.
    assert_eq!(unsafe { (*p.as_ptr()).flags }, DlpackFlags::READ_ONLY);
    drop(tensor);
    let mut b = MemArray::<u8, 1>::new([4]).unwrap();
    let id = crate::LockId::next();
    b.enter(id).unwrap();
    assert!(matches!(b.export_source(false, None), Err(Error::Locked { .. })));
    assert!(b.export_source(false, Some(id)).is_ok());
}
