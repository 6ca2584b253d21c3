use super::*;
use crate::device::{Device, DeviceId, Residence};
use crate::element::Scalar;
use crate::object::ArrayObject;
use crate::stream::Stream;

#[test]
fn new_arrays_are_zeroed_with_their_shape() {
    let a = MemArray::<f32, 3>::new([2, 3, 4]).unwrap();
    assert_eq!(a.shape(), &[2, 3, 4]);
    assert_eq!((a.size(), a.nbytes()), (24, 96));
    assert_eq!(a.to_vec().unwrap(), vec![0.0; 24]);
    assert_eq!((a.residence(), a.on_device(), a.cuda_device_id()), (Residence::Host, false, DeviceId::ZERO));
}

#[test]
fn get_and_write_follow_c_order() {
    let mut a = MemArray::<i64, 2>::new([2, 3]).unwrap();
    a.write([1, 2], 7).unwrap();
    a.write([0, 1], -3).unwrap();
    assert_eq!(a.to_vec().unwrap(), vec![0, -3, 0, 0, 0, 7]);
    assert_eq!(a.get([1, 2]), Ok(7));
    assert_eq!(a.get([2, 0]), Err(Error::IndexOutOfBounds { index: 2, axis: 0, size: 2 }));
    assert_eq!(a.write([0, 3], 1), Err(Error::IndexOutOfBounds { index: 3, axis: 1, size: 3 }));
}

#[test]
fn clone_is_deep_and_swap_is_cheap() {
    let mut a = MemArray::<f64, 1>::from_slice([3], &[1.0, 2.0, 3.0]).unwrap();
    let b = a.clone();
    a.write([0], 9.0).unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![1.0, 2.0, 3.0]);
    let mut c = MemArray::<f64, 1>::new([1]).unwrap();
    let before = a.as_ptr().unwrap();
    std::mem::swap(&mut a, &mut c);
    assert_eq!(c.as_ptr().unwrap(), before, "swap moves the buffer, it does not copy it");
    assert_eq!(c.to_vec().unwrap(), vec![9.0, 2.0, 3.0]);
}

#[test]
fn locks_refuse_other_ids_and_release() {
    let mut a = MemArray::<i32, 1>::new([4]).unwrap();
    let id = LockId::next();
    a.enter(id).unwrap();
    assert_eq!(a.get([0]), Err(Error::Locked { holder: id.get() }));
    assert_eq!(a.enter(LockId::next()), Err(Error::Locked { holder: id.get() }));
    assert_eq!(a.write_with([0], 5, Some(id)), Ok(()));
    let other = LockId::next();
    assert_eq!(a.exit(other), Err(Error::Locked { holder: id.get() }));
    a.exit(id).unwrap();
    assert_eq!(a.get([0]), Ok(5));
    assert_eq!(a.get_with([0], Some(id)), Err(Error::StaleLock { id: id.get() }));
}

#[test]
fn rust_guard_locks_and_unlocks_on_drop() {
    let mut a = MemArray::<u8, 2>::new([2, 2]).unwrap();
    {
        let mut guard = a.lock().unwrap();
        guard.write([1, 1], 200).unwrap();
        assert_eq!(guard.get([1, 1]), Ok(200));
        assert!(guard.array().is_locked());
        assert_eq!(guard.to_vec(), Ok(vec![0, 0, 0, 200]));
    }
    assert!(!a.is_locked());
    assert_eq!(a.lock_number(), 0);
    assert_eq!(a.get([1, 1]), Ok(200));
}

#[test]
fn readonly_arrays_refuse_writes() {
    let mut a = MemArray::<f32, 1>::with_options([2], ArrayOptions { readonly: true, ..Default::default() }).unwrap();
    assert_eq!(a.write([0], 1.0), Err(Error::ReadOnly));
    assert_eq!(a.copy_from_slice(&[1.0, 2.0]), Err(Error::ReadOnly));
    assert!(a.as_mut_ptr().is_err());
    assert_eq!(a.get([1]), Ok(0.0));
}

#[test]
fn bad_dimensions_and_options() {
    let opts = ArrayOptions::default();
    assert!(matches!(MemArray::<f32, 2>::from_dims(&[2], opts), Err(Error::InvalidShape(_))));
    assert!(matches!(MemArray::<f32, 2>::from_dims(&[2, -1], opts), Err(Error::InvalidShape(_))));
    assert!(matches!(MemArray::<f64, 2>::from_dims(&[1 << 62, 4], opts), Err(Error::TooLarge { .. })));
    let negative = DeviceId::new(-1).unwrap_err();
    assert!(matches!(negative, Error::InvalidArgument(ref m) if m == "device_id must be >= 0, got -1"), "{negative}");
    let zero = MemArray::<f32, 2>::from_dims(&[0, 5], opts).unwrap();
    assert_eq!((zero.size(), zero.nbytes()), (0, 0));
}

#[test]
fn indexer_matches_checked_access() {
    let mut a = MemArray::<i32, 3>::new([2, 3, 4]).unwrap();
    let mut indexer = a.indexer_mut().unwrap();
    assert_eq!(indexer.size(), 24);
    for offset in 0..indexer.size() {
        let index = indexer.unravel(offset);
        assert_eq!(indexer.as_indexer().offset(index), Some(offset));
        // SAFETY: offset < size.
        unsafe { indexer.set_unchecked(offset, index.iter().sum::<usize>() as i32) };
    }
    assert_eq!(indexer.get([2, 0, 0]), None);
    assert_eq!(a.get([1, 2, 3]), Ok(6));
}

#[test]
fn moving_to_cuda_is_a_clear_error_without_a_gpu() {
    let mut a = MemArray::<f32, 1>::new([2]).unwrap();
    assert_eq!(a.move_memory(Device::CPU, Stream::LEGACY, false), Ok(()));
    if cfg!(feature = "cuda") && crate_has_gpu() {
        return;
    }
    let err = a.move_memory(Device::cuda(DeviceId::ZERO), Stream::LEGACY, false).unwrap_err();
    assert!(matches!(err, Error::Unavailable(ref m) if m.contains("CUDA")), "{err}");
    assert_eq!(a.residence(), Residence::Host);
}

#[test]
fn type_erased_access() {
    let mut a = MemArray::<f32, 2>::new([2, 2]).unwrap();
    let object: &mut dyn ArrayObject = &mut a;
    object.set_scalar(&[-1, 0], Scalar::Int(3), None).unwrap();
    assert_eq!(object.get_scalar(&[1, 0], None), Ok(Scalar::Float(3.0)));
    assert_eq!(object.get_scalar(&[0], None), Err(Error::IndexArity { expected: 2, got: 1 }));
    assert_eq!(object.raw_view().dtype().name, "float32");
}

fn crate_has_gpu() -> bool {
    #[cfg(feature = "cuda")]
    return crate::cuda::is_available();
    #[cfg(not(feature = "cuda"))]
    false
}

#[test]
fn a_core_is_a_typed_array_only_of_its_own_type_and_rank() {
    use crate::element::ElementOps;
    let opts = ArrayOptions::default();
    let mut core = ArrayCore::from_dims(&[2, 3], 2, ElementOps::of::<f32>(), opts).unwrap();
    assert!(MemArray::<i32, 2>::view(&core).is_none(), "same size, another type");
    assert!(MemArray::<f32, 3>::view(&core).is_none(), "another rank");
    assert!(MemArray::<f64, 2>::view_mut(&mut core).is_none());
    MemArray::<f32, 2>::view_mut(&mut core).unwrap().write([1, 2], 2.5).unwrap();
    let typed = MemArray::<f32, 2>::view(&core).unwrap();
    assert_eq!((typed.shape(), typed.get([1, 2])), (&[2, 3], Ok(2.5)));
    assert_eq!(core.get_scalar(&[-1, -1], None), Ok(Scalar::Float(2.5)));
    assert!(
        matches!(ArrayCore::from_dims(&[2], 9, ElementOps::of::<f32>(), opts), Err(Error::InvalidArgument(m)) if m.contains("ndim 9"))
    );
}

#[test]
fn nested_vecs_build_2d_and_3d_arrays_and_ragged_input_is_refused() {
    let rows = vec![vec![1i32, 2, 3], vec![4, 5, 6]];
    let array = MemArray::<i32, 2>::from_vec2(&rows).unwrap();
    assert_eq!(array.shape(), &[2, 3]);
    assert_eq!(array.to_vec().unwrap(), [1, 2, 3, 4, 5, 6]);
    let ragged = MemArray::<i32, 2>::from_vec2(&[vec![1, 2], vec![3]]).unwrap_err();
    assert!(ragged.to_string().contains("row 1 has 1"), "{ragged}");
    assert_eq!(MemArray::<f64, 2>::from_vec2(&[]).unwrap().shape(), &[0, 0]);

    let planes = vec![vec![vec![1u8, 2], vec![3, 4]], vec![vec![5, 6], vec![7, 8]]];
    let array = MemArray::<u8, 3>::from_vec3(&planes).unwrap();
    assert_eq!(array.shape(), &[2, 2, 2]);
    assert_eq!(array.to_vec().unwrap(), [1, 2, 3, 4, 5, 6, 7, 8]);
    let short_plane = MemArray::<u8, 3>::from_vec3(&[vec![vec![1]], vec![]]).unwrap_err();
    assert!(short_plane.to_string().contains("plane 1 has 0"), "{short_plane}");
    let short_row = MemArray::<u8, 3>::from_vec3(&[vec![vec![1, 2]], vec![vec![3]]]).unwrap_err();
    assert!(short_row.to_string().contains("row [1][0] has 1"), "{short_row}");
}

#[test]
fn cast_converts_as_item_assignment_does() {
    let floats = MemArray::<f64, 1>::from_slice([4], &[1.9, -2.5, 0.0, 300.0]).unwrap();
    assert_eq!(floats.cast::<i32>().unwrap().to_vec().unwrap(), [1, -2, 0, 300]);
    assert_eq!(floats.cast::<f32>().unwrap().to_vec().unwrap(), [1.9f32, -2.5, 0.0, 300.0]);
    assert!(floats.cast::<u8>().is_err(), "-2.5 and 300 do not fit uint8");
    let ints = MemArray::<i16, 2>::from_slice([2, 2], &[1, 2, 3, 4]).unwrap();
    let wide = ints.cast::<i64>().unwrap();
    assert_eq!((wide.shape(), wide.to_vec().unwrap()), (&[2, 2], vec![1i64, 2, 3, 4]));
}

#[test]
fn resize_keeps_c_order_elements_and_zero_fills() {
    let mut array = MemArray::<i32, 2>::from_slice([2, 3], &[1, 2, 3, 4, 5, 6]).unwrap();
    array.resize([3, 3]).unwrap();
    assert_eq!(array.to_vec().unwrap(), [1, 2, 3, 4, 5, 6, 0, 0, 0]);
    array.resize([2, 2]).unwrap();
    assert_eq!((array.shape(), array.to_vec().unwrap()), (&[2, 2], vec![1, 2, 3, 4]));
    array.make_readonly();
    assert_eq!(array.resize([1, 1]), Err(crate::error::Error::ReadOnly));
}

#[test]
fn vector_arrays_hold_their_lanes_aligned_as_cuda_loads_them() {
    let values = [[1.0f32, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [-1.0, -2.0, -3.0, -4.0]];
    let mut a = MemArray::<[f32; 4], 1>::from_slice([3], &values).unwrap();
    assert_eq!((a.size(), a.nbytes(), a.get([1]).unwrap()), (3, 48, [5.0, 6.0, 7.0, 8.0]));
    // CUDA's float4 loads need 16-byte alignment, which amso's allocations give.
    assert_eq!(a.data_address() % 16, 0);
    a.write([2], [0.5; 4]).unwrap();
    assert_eq!(a.to_vec().unwrap()[2], [0.5; 4]);
    let dtype = &<[f32; 4] as crate::element::ArrayElement>::DTYPE;
    assert_eq!(
        (dtype.name, dtype.dlpack(), dtype.itemsize(), dtype.c_type),
        ("float32x4", (2, 32, 4), 16, "amso_float32x4_t")
    );
}
