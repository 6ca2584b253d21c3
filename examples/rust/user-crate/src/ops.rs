//! Functions inside compiled graphs (`#[amso_macros::op]`): each is an eager Python function,
//! an XLA FFI handler for `jax.jit` (`amso.ops.jax`) and a `torch.library` op for
//! `torch.compile` (`amso.ops.torch`), from the one signature. On CUDA buffers they launch
//! their kernels on the stream they are given (XLA's, torch's current one, or the eager
//! arguments'); on host buffers they run the same formulas in Rust.

use amso_runtime::cuda::{with_stream, CudaStream, Kernel, LaunchConfig, PushKernelArg};
use amso_runtime::op::{Buffer, BufferMut};
use amso_runtime::{Error, Stream};

use crate::cic;

static DRIFT_KERNEL: Kernel = Kernel::new(include_str!("ops.cu"), "drift");
static CLEAR_KERNEL: Kernel = Kernel::new(include_str!("ops.cu"), "clear");

/// `(x + dt * v) mod box_size`, in float64 as the kernel computes it (no fused multiply-add).
fn drifted(x: f32, v: f32, dt: f64, box_size: f64) -> f32 {
    let moved = (f64::from(x) + dt * f64::from(v)) % box_size;
    (if moved < 0.0 { moved + box_size } else { moved }) as f32
}

/// One drift step of periodic particles: `moved = (positions + dt * velocities) mod box_size`,
/// for float32 `(n, 3)` positions and velocities.
#[amso_macros::op(outputs(moved = like(positions)))]
pub(crate) fn drift(
    positions: Buffer<'_, f32, 2>,
    velocities: Buffer<'_, f32, 2>,
    mut moved: BufferMut<'_, f32, 2>,
    dt: f64,
    box_size: f64,
    stream: Stream,
) -> Result<(), Error> {
    if positions.shape() != velocities.shape() || positions.shape() != moved.shape() {
        return Err(Error::InvalidArgument(format!(
            "positions, velocities and moved must have one shape, got {:?}, {:?} and {:?}",
            positions.shape(),
            velocities.shape(),
            moved.shape()
        )));
    }
    check_box_size(box_size)?;
    if moved.is_cuda() {
        let (x, v, out) = (positions.device_indexer()?, velocities.device_indexer()?, moved.device_indexer_mut()?);
        let (device, function, config) =
            (positions.device().id, DRIFT_KERNEL.function(positions.device().id)?, grid_for(out.size()));
        let queue = |s: &CudaStream| {
            // SAFETY: `drift` takes (Indexer<float, 2> x3, double, double), which these are,
            // over buffers alive for the call.
            unsafe { s.launch_builder(&function).arg(&x).arg(&v).arg(&out).arg(&dt).arg(&box_size).launch(config) }
                .map(drop)
        };
        // SAFETY: the op's stream (XLA's, torch's or the eager arguments'), alive for the call.
        return unsafe { with_stream(device, stream, queue) };
    }
    let (x, v) = (positions.as_slice()?, velocities.as_slice()?);
    for ((out, &x), &v) in moved.as_slice_mut()?.iter_mut().zip(x).zip(v) {
        *out = drifted(x, v, dt, box_size);
    }
    Ok(())
}

/// The cloud-in-cell density of float32 `(n, 3)` positions on a `cells`³ float64 grid of a
/// periodic box of side `box_size` (the grid is cleared first: every element is written).
#[amso_macros::op(outputs(grid = [cells, cells, cells]))]
pub(crate) fn density(
    positions: Buffer<'_, f32, 2>,
    mut grid: BufferMut<'_, f64, 3>,
    box_size: f64,
    cells: i64,
    stream: Stream,
) -> Result<(), Error> {
    check_box_size(box_size)?;
    let side = usize::try_from(cells).unwrap_or(usize::MAX);
    if positions.shape()[1] != 3 || grid.shape() != [side; 3] {
        return Err(Error::InvalidArgument(format!(
            "positions must be (n, 3) and grid ({cells}, {cells}, {cells}), got {:?} and {:?}",
            positions.shape(),
            grid.shape()
        )));
    }
    if grid.is_cuda() {
        let (particles, density, device) =
            (positions.device_indexer()?, grid.device_indexer_mut()?, positions.device().id);
        let (clear, deposit) = (CLEAR_KERNEL.function(device)?, crate::CIC_KERNEL.function(device)?);
        let (clear_config, deposit_config) = (grid_for(density.size()), grid_for(particles.shape()[0]));
        // SAFETY: `clear` takes (Indexer<double, 3>) and `cic_deposit` (Indexer<float, 2>,
        // Indexer<double, 3>, double), which these are, over buffers alive for the call; both
        // queued in order on the op's stream.
        let queue = |s: &CudaStream| unsafe {
            s.launch_builder(&clear).arg(&density).launch(clear_config)?;
            if particles.size() > 0 {
                s.launch_builder(&deposit).arg(&particles).arg(&density).arg(&box_size).launch(deposit_config)?;
            }
            Ok(())
        };
        // SAFETY: the op's stream (XLA's, torch's or the eager arguments'), alive for the call.
        return unsafe { with_stream(device, stream, queue) };
    }
    grid.as_slice_mut()?.fill(0.0);
    cic::deposit(positions.as_array()?, grid.as_array_mut()?, box_size);
    Ok(())
}

/// A running sum on the host (`platforms(cpu)`): `out[i] = x[0] + ... + x[i]`, or from the end
/// (`out[i] = x[i] + ... + x[n-1]`) when `reverse`. When `panic_at` is an index of `x`, it
/// panics there instead, to show that a panic inside an op comes back as the caller's error.
#[amso_macros::op(outputs(out = like(x)), platforms(cpu))]
pub(crate) fn running_sum(
    x: Buffer<'_, f64, 1>,
    mut out: BufferMut<'_, f64, 1>,
    reverse: bool,
    panic_at: i64,
) -> Result<(), Error> {
    let (x, out) = (x.as_slice()?, out.as_slice_mut()?);
    let order: Box<dyn Iterator<Item = usize>> =
        if reverse { Box::new((0..x.len()).rev()) } else { Box::new(0..x.len()) };
    let mut total = 0.0;
    for i in order {
        assert!(i64::try_from(i) != Ok(panic_at), "running_sum was asked to panic at index {i}");
        total += x[i];
        out[i] = total;
    }
    Ok(())
}

fn check_box_size(box_size: f64) -> Result<(), Error> {
    if box_size.is_finite() && box_size > 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("box_size must be a positive number, got {box_size}")))
    }
}

/// One thread per element of `count`, in blocks of 256.
fn grid_for(count: usize) -> LaunchConfig {
    let blocks = (count as u64).div_ceil(256).clamp(1, 65_535 * 32) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}
