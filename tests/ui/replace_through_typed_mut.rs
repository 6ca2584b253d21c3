// `with_typed_mut` lends the array's changing methods, not the array: replacing it would free
// memory that buffer exports describe and change a shape C readers read without a lock.
use amso_runtime::python::MemArrayBase;
use amso_runtime::MemArray;
use pyo3::Python;

fn replace(py: Python<'_>, base: &MemArrayBase) {
    base.with_typed_mut::<f32, 1, _>(py, |array| {
        **array = MemArray::new([4]).unwrap();
    });
}

fn main() {}
