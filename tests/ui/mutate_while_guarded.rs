// While a lock guard holds the array, the array itself cannot be touched.
use amso_runtime::MemArray;

fn main() {
    let mut array = MemArray::<i32, 1>::new([4]).unwrap();
    let guard = array.lock().unwrap();
    array.write([0], 1).unwrap();
    drop(guard);
}
