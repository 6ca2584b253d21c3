//! Cloud-in-cell deposit on the host, over ndarray views: particle positions as rows of a
//! float32 matrix (structure of arrays) or as the `pos` field of particle records (array of
//! structs), one formula for both.

use amso_runtime::records::Particle;
use ndarray::{ArrayView1, ArrayView2, ArrayViewMut3, Axis};

/// The lower cell and the weight of the upper one along an axis of `cells` cells of width
/// `spacing`, for coordinate `x`: `u = x / h - 0.5`, `i0 = floor(u)`, `f = u - i0`.
fn split(x: f64, spacing: f64, cells: usize) -> ([usize; 2], [f64; 2]) {
    let u = x / spacing - 0.5;
    let lower = u.floor();
    let fraction = u - lower;
    let n = cells as i64;
    let i0 = (lower as i64).rem_euclid(n) as usize;
    ([i0, (i0 + 1) % cells], [1.0 - fraction, fraction])
}

/// Add each particle's unit mass to the 8 cells around it, periodic in every axis.
pub(crate) fn deposit(positions: ArrayView2<'_, f32>, density: ArrayViewMut3<'_, f64>, box_size: f64) {
    deposit_each(positions.axis_iter(Axis(0)).map(|p| [p[0], p[1], p[2]]), density, box_size);
}

/// The same deposit with each particle's position read from its record's `pos` (unit mass, as
/// `deposit`: the same sums in the same order).
pub(crate) fn deposit_records(particles: ArrayView1<'_, Particle>, density: ArrayViewMut3<'_, f64>, box_size: f64) {
    deposit_each(particles.iter().map(|p| p.pos), density, box_size);
}

fn deposit_each(positions: impl Iterator<Item = [f32; 3]>, mut density: ArrayViewMut3<'_, f64>, box_size: f64) {
    let cells = density.dim();
    let cells = [cells.0, cells.1, cells.2];
    if cells.contains(&0) {
        return;
    }
    let spacing = cells.map(|n| box_size / n as f64);
    for particle in positions {
        let [(ix, wx), (iy, wy), (iz, wz)] =
            std::array::from_fn(|d| split(f64::from(particle[d]), spacing[d], cells[d]));
        for a in 0..2 {
            for b in 0..2 {
                for c in 0..2 {
                    density[[ix[a], iy[b], iz[c]]] += wx[a] * wy[b] * wz[c];
                }
            }
        }
    }
}
