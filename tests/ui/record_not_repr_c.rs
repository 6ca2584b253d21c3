// A record's layout is C's: #[derive(Element)] on a struct of named fields needs #[repr(C)].
use amso_macros::Element;

#[derive(Clone, Copy, Debug, Default, Element)]
pub struct Particle {
    pos: [f32; 3],
    mass: f64,
}

fn main() {}
