// A read-only indexer borrows the array too: no write while it lives.
use amso_runtime::MemArray;

fn main() {
    let mut array = MemArray::<f32, 1>::new([4]).unwrap();
    let reader = array.indexer().unwrap();
    array.write([0], 1.0).unwrap();
    println!("{:?}", reader.get([0]));
}
