// An indexer borrows its array: it cannot outlive it.
use amso_runtime::MemArray;

fn main() {
    let indexer;
    {
        let mut array = MemArray::<f64, 2>::new([2, 2]).unwrap();
        indexer = array.indexer_mut().unwrap();
    }
    println!("{}", indexer.size());
}
