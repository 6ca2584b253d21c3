// Only the spec's element types can fill an array.
use amso_runtime::MemArray;

fn main() {
    let _ = MemArray::<String, 1>::new([3]);
}
