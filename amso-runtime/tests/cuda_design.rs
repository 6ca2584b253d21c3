//! The MemArray design's GPU test in Rust: write on the host, move to the device, run
//! add_index, check the result without moving back (single-element reads from the device),
//! then move back and check again. Skips (and says so) where no CUDA driver is present.
#![cfg(feature = "cuda")]

use amso_runtime::{Device, MemArray};

fn gpu() -> bool {
    let available = amso_runtime::cuda::is_available();
    if !available {
        eprintln!("skipped: no CUDA driver on this machine");
    }
    available
}

fn design_sequence<T: amso_runtime::Element + PartialEq, const N: usize>(
    shape: [usize; N],
    fill: T,
    expected: impl Fn(T, usize) -> T,
) {
    let size: usize = shape.iter().product();
    let mut array = MemArray::<T, N>::from_slice(shape, &vec![fill; size]).unwrap();
    let layout = MemArray::<u8, N>::new(shape).unwrap();
    let layout = layout.indexer().unwrap();
    let unravel = |offset| layout.unravel(offset);
    array.add_index_tuple(0).unwrap();
    assert!(array.on_device());
    let device = array.device_indexer().unwrap();
    assert_eq!((device.shape(), device.size()), (shape, size));
    assert_ne!(device.device_address(), 0);
    for offset in (0..size).step_by((size / 97).max(1)) {
        let index = unravel(offset);
        let sum: usize = index.iter().sum();
        assert_eq!(array.get(index).unwrap(), expected(fill, sum), "on the device at {index:?}");
    }
    array.move_memory(Device::CPU, 0, false).unwrap();
    let values = array.to_vec().unwrap();
    for (offset, value) in values.into_iter().enumerate() {
        let sum: usize = unravel(offset).iter().sum();
        assert_eq!(value, expected(fill, sum), "on the host at offset {offset}");
    }
}

#[test]
fn add_index_on_the_device_matches_the_host_computation() {
    if !gpu() {
        return;
    }
    design_sequence::<f32, 3>([7, 33, 65], 2.0, |x, s| x + s as f32);
    design_sequence::<f64, 2>([129, 3], -1.5, |x, s| x + s as f64);
    design_sequence::<i32, 1>([1000], 5, |x, s| x + s as i32);
    design_sequence::<i64, 3>([4, 5, 6], 1 << 40, |x, s| x + s as i64);
    design_sequence::<u8, 2>([300, 2], 250, |x, s| x.wrapping_add(s as u8));
}

#[test]
fn clone_of_a_device_array_is_deep() {
    if !gpu() {
        return;
    }
    let mut a = MemArray::<f32, 1>::from_slice([4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    a.move_memory(Device::cuda(0), 0, false).unwrap();
    let b = a.clone();
    a.write([0], 10.0).unwrap();
    assert_eq!(b.get([0]).unwrap(), 1.0);
    assert!(b.on_device());
}
