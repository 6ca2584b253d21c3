// A record names its fields: NumPy's structured dtype and the DType's Field list need names.
use amso_macros::Element;

#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(C)]
pub struct Pair(f32, f64);

#[derive(Clone, Copy, Debug, Element)]
#[repr(C)]
pub enum Kind {
    A,
    B,
}

fn main() {}
