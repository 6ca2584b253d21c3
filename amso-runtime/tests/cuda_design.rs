//! The MemArray design's GPU test in Rust: write on the host, move to the device, run
//! add_index, check the result without moving back (single-element reads from the device),
//! then move back and check again. Skips (and says so) where no CUDA driver is present.
#![cfg(feature = "cuda")]

use amso_runtime::{Device, DeviceId, MemArray, Stream};

/// The GPU, one test at a time (a CUDA graph capture forbids host waits in other threads),
/// or None (the test skips, and says so) where no CUDA driver is present.
fn gpu() -> Option<std::sync::MutexGuard<'static, ()>> {
    static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if !amso_runtime::cuda::is_available() {
        eprintln!("skipped: no CUDA driver on this machine");
        return None;
    }
    Some(GPU.lock().unwrap_or_else(|e| e.into_inner()))
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
    array.add_index_tuple(Stream::LEGACY).unwrap();
    assert!(array.on_device());
    let device = array.device_indexer().unwrap();
    assert_eq!((device.shape(), device.size()), (shape, size));
    assert_ne!(device.device_address(), 0);
    for offset in (0..size).step_by((size / 97).max(1)) {
        let index = unravel(offset);
        let sum: usize = index.iter().sum();
        assert_eq!(array.get(index).unwrap(), expected(fill, sum), "on the device at {index:?}");
    }
    array.move_memory(Device::CPU, Stream::LEGACY, false).unwrap();
    let values = array.to_vec().unwrap();
    for (offset, value) in values.into_iter().enumerate() {
        let sum: usize = unravel(offset).iter().sum();
        assert_eq!(value, expected(fill, sum), "on the host at offset {offset}");
    }
}

#[test]
fn add_index_on_the_device_matches_the_host_computation() {
    let Some(_gpu) = gpu() else {
        return;
    };
    design_sequence::<f32, 3>([7, 33, 65], 2.0, |x, s| x + s as f32);
    design_sequence::<f64, 2>([129, 3], -1.5, |x, s| x + s as f64);
    design_sequence::<i32, 1>([1000], 5, |x, s| x + s as i32);
    design_sequence::<i64, 3>([4, 5, 6], 1 << 40, |x, s| x + s as i64);
    design_sequence::<u8, 2>([300, 2], 250, |x, s| x.wrapping_add(s as u8));
}

#[test]
fn clone_of_a_device_array_is_deep() {
    let Some(_gpu) = gpu() else {
        return;
    };
    let mut a = MemArray::<f32, 1>::from_slice([4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    a.move_memory(Device::cuda(DeviceId::ZERO), Stream::LEGACY, false).unwrap();
    let b = a.clone();
    a.write([0], 10.0).unwrap();
    assert_eq!(b.get([0]).unwrap(), 1.0);
    assert!(b.on_device());
}

/// A kernel of the user's own, compiled with amso.cuh and launched through the Rust API on a
/// stream, ordered after amso's work on the array and recorded for amso's later work.
#[test]
fn your_own_kernel_through_the_rust_api() {
    use amso_runtime::cuda::{with_stream, Kernel, LaunchConfig, PushKernelArg};
    let Some(_gpu) = gpu() else {
        return;
    };
    static SCALE: Kernel = Kernel::new(
        r#"#include "amso.cuh"
        extern "C" __global__ void scale(amso::Indexer<double, 2> x, double by) {
            const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
            for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < x.size(); i += stride) {
                uint64_t at[2];
                x.unravel(i, at);
                x(at[0], at[1]) = x(at[0], at[1]) * by + (double)(10 * at[0] + at[1]);
            }
        }"#,
        "scale",
    );
    let values: Vec<f64> = (0..210).map(f64::from).collect();
    let mut array = MemArray::<f64, 2>::from_slice([30, 7], &values).unwrap();
    array.add_index_tuple(Stream::LEGACY).unwrap(); // pending work on amso's stream, which the kernel must follow
    let stream = Stream::PER_THREAD; // not amso's
    let function = SCALE.function(DeviceId::ZERO).unwrap();
    // SAFETY: the per-thread default stream is always valid.
    let x = unsafe { array.device_indexer_on(stream) }.unwrap();
    let queue = |s: &amso_runtime::cuda::CudaStream| {
        // SAFETY: the kernel takes (Indexer<double, 2>, double); the array is live device memory.
        unsafe { s.launch_builder(&function).arg(&x).arg(&2.0f64).launch(LaunchConfig::for_num_elems(210)) }.map(drop)
    };
    // SAFETY: as above.
    unsafe { with_stream(DeviceId::ZERO, stream, queue) }.unwrap();
    // SAFETY: as above.
    unsafe { array.record_work(stream) }.unwrap();
    array.move_memory(Device::CPU, Stream::LEGACY, false).unwrap();
    let got = array.to_vec().unwrap();
    for (offset, value) in got.into_iter().enumerate() {
        let (i, j) = (offset / 7, offset % 7);
        let expected = (values[offset] + (i + j) as f64) * 2.0 + (10 * i + j) as f64;
        assert_eq!(value, expected, "at ({i}, {j})");
    }
    let broken = Kernel::from_source("extern \"C\" __global__ void broken() { undefined_name; }", "broken");
    let error = broken.function(DeviceId::ZERO).unwrap_err();
    let text = error.to_string();
    assert!(text.contains("could not compile kernel `broken` for sm_") && text.contains("undefined_name"), "{text}");
    // The facts, apart: which kernel, for which architecture, NVRTC's status and log.
    let amso_runtime::Error::Compile { kernel, arch, status, log } = error else {
        panic!("not a compile error: {text}")
    };
    assert_eq!((kernel.as_str(), status.as_str()), ("broken", "NVRTC_ERROR_COMPILATION"));
    assert!(arch.starts_with("sm_") && arch[3..].bytes().all(|b| b.is_ascii_digit()), "{arch}");
    assert!(log.contains("undefined_name") && !log.contains("NVRTC could not compile"), "{log}");
}

/// CUDA graph capture without any framework: `cuStreamBeginCapture` (cudarc) on a stream of
/// the caller's, amso's pinned moves, `add_index_tuple` and a kernel of the caller's captured
/// on it, a pageable move refused with the capture left valid, and the graph launched three
/// times; each launch copies up, adds, scales and copies back.
#[test]
fn operations_captured_into_a_cuda_graph_run_once_per_launch() {
    use amso_runtime::cuda::{with_stream, Kernel, LaunchConfig, PushKernelArg};
    use amso_runtime::ArrayOptions;
    use cudarc::driver::{sys, CudaContext};
    let Some(_gpu) = gpu() else {
        return;
    };
    static SCALE: Kernel = Kernel::new(
        r#"#include "amso.cuh"
        extern "C" __global__ void twice_plus_one(amso::Indexer<float, 2> x) {
            const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
            if (i < x.size()) x.data[i] = 2.0f * x.data[i] + 1.0f;
        }"#,
        "twice_plus_one",
    );
    let shape = [9, 13];
    let values: Vec<f32> = (0..117).map(|v| v as f32 * 0.25 - 7.0).collect();
    let mut array =
        MemArray::<f32, 2>::with_options(shape, ArrayOptions { pinned: true, ..Default::default() }).unwrap();
    array.copy_from_slice(&values).unwrap();
    let mut pageable = MemArray::<f32, 2>::from_slice(shape, &values).unwrap();
    let context = CudaContext::new(0).unwrap();
    let stream = context.new_stream().unwrap();
    // SAFETY: the stream lives until the end of the test, after amso's last use of it.
    let handle = unsafe { Stream::from_handle(stream.cu_stream() as usize) };
    let function = SCALE.function(DeviceId::ZERO).unwrap();

    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
    let refused = pageable.move_memory(Device::cuda(DeviceId::ZERO), handle, true).unwrap_err().to_string();
    array.move_memory(Device::cuda(DeviceId::ZERO), handle, true).unwrap();
    array.add_index_tuple(handle).unwrap();
    // SAFETY: `handle` is the live capturing stream; the kernel takes one Indexer<float, 2>.
    let x = unsafe { array.device_indexer_on(handle) }.unwrap();
    let queue = |s: &amso_runtime::cuda::CudaStream| {
        // SAFETY: as above; the array's device memory outlives the graph's launches.
        unsafe { s.launch_builder(&function).arg(&x).launch(LaunchConfig::for_num_elems(117)) }.map(drop)
    };
    // SAFETY: as above.
    unsafe { with_stream(DeviceId::ZERO, handle, queue) }.unwrap();
    // SAFETY: as above.
    unsafe { array.record_work(handle) }.unwrap();
    array.move_memory(Device::CPU, handle, true).unwrap();
    assert_eq!(stream.capture_status().unwrap(), sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE);
    let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0)).unwrap().expect("a graph");

    assert!(refused.contains("pageable host memory") && refused.contains("capture is still valid"), "{refused}");
    assert!(!pageable.on_device());
    assert_eq!(array.to_vec().unwrap(), values, "capturing runs nothing");
    for _ in 0..3 {
        graph.launch().unwrap();
    }
    stream.synchronize().unwrap();
    let got = array.to_vec().unwrap();
    for (offset, value) in got.into_iter().enumerate() {
        let (i, j) = (offset / 13, offset % 13);
        let expected = (0..3).fold(values[offset], |v, _| 2.0 * (v + (i + j) as f32) + 1.0);
        assert_eq!(value, expected, "at ({i}, {j})");
    }
}
