// A packed record has no C layout NumPy's aligned dtypes or amso's headers share.
use amso_macros::Element;

#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(C, packed)]
pub struct Particle {
    id: i8,
    mass: f64,
}

fn main() {}
