// A #[derive(Element)] type's values convert through `scalar`: `From` both ways.
use amso_macros::Element;

#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(transparent)]
#[amso(name = "seconds", code = kDLFloat, bits = 64, scalar = f64)]
pub struct Seconds(f64);

fn main() {}
