// #[amso_array] declares a class; it goes on a unit struct.
use amso_macros::amso_array;

#[amso_array(f32, 2)]
pub struct Positions {
    count: usize,
}

fn main() {}
