// #[derive(Element)] states a dtype's facts; every mistake is reported at the key it is about.
use amso_macros::Element;

// Not #[repr(transparent)]: its layout would not be its field's.
#[derive(Clone, Copy, Debug, Default, Element)]
#[amso(name = "meters", code = kDLFloat, bits = 64, scalar = f64)]
pub struct Meters(f64);

// float8 codes have 8 bits per lane; the code's name is DLPack's.
#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(transparent)]
#[amso(name = "e5m2", code = kDLFloat8_e5m2, bits = 16, scalar = f32)]
pub struct E5M2(u16);

#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(transparent)]
#[amso(name = "Tenths", code = kDLFixed, bits = 32, colour = "red")]
pub struct Tenths(i32);

fn main() {}
