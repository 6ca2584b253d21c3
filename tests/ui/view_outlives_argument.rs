// A view of a typed argument borrows it: it cannot outlive the argument (whose memory the
// producer may free once the argument drops).
use amso_runtime::python::ArrayMut;

fn keep(mut cells: ArrayMut<'_, f64, 1>) -> &'static mut [f64] {
    cells.as_slice_mut().unwrap()
}

fn main() {}
