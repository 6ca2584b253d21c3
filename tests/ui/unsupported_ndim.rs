// ndim outside 1..=8 points at the number.
use amso_macros::amso_array;

#[amso_array(f32, 0)]
pub struct Scalar;

#[amso_array(float64, 9)]
pub struct Hyper;

fn main() {}
