// A typed array argument holds one of the spec's element types.
use amso_runtime::python::ArrayRef;

fn count(_strings: ArrayRef<'_, String, 1>) {}

fn main() {}
