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
    let mut array = MemArray::<T, N>::new(shape).unwrap();
    {
        let indexer = array.indexer(None).unwrap();
        for offset in 0..indexer.size() {
            // SAFETY: offset < size and the indexer borrows the array exclusively.
            unsafe { indexer.write_unchecked(offset, fill) };
        }
    }
    array.add_index_tuple(0, None).unwrap();
    assert!(array.on_device());
    let size: usize = shape.iter().product();
    for offset in (0..size).step_by((size / 97).max(1)) {
        let index = amso_runtime::shape::unravel(&shape, offset);
        let sum: usize = index.iter().sum();
        assert_eq!(array.get(index, None).unwrap(), expected(fill, sum), "on the device at {index:?}");
    }
    array.move_memory(Device::CPU, 0, false, None).unwrap();
    let values = array.to_vec(None).unwrap();
    for (offset, value) in values.into_iter().enumerate() {
        let sum: usize = amso_runtime::shape::unravel(&shape, offset).iter().sum();
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
    a.move_memory(Device::cuda(0), 0, false, None).unwrap();
    let b = a.clone();
    a.write([0], 10.0, None).unwrap();
    assert_eq!(b.get([0], None).unwrap(), 1.0);
    assert!(b.on_device());
}
