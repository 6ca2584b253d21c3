// While an indexer (a view for kernels) exists, the array cannot be written or dropped.
use amso_runtime::MemArray;

fn main() {
    let mut array = MemArray::<i32, 2>::new([2, 2]).unwrap();
    let indexer = array.indexer_mut().unwrap();
    array.write([0, 0], 1).unwrap();
    println!("{}", indexer.size());
}
