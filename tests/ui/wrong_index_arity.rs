// A 3-D array is indexed with three indices: two is a type error, not a runtime surprise.
use amso_runtime::MemArray;

fn main() {
    let array = MemArray::<f32, 3>::new([2, 3, 4]).unwrap();
    let _ = array.get([0, 1]);
}
