// The bits a #[derive(Element)] states must be its type's size.
use amso_macros::Element;

#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(transparent)]
#[amso(name = "counts", code = kDLUInt, bits = 16, scalar = u16)]
pub struct Counts(u8);

impl From<Counts> for u16 {
    fn from(c: Counts) -> u16 {
        c.0.into()
    }
}
impl From<u16> for Counts {
    fn from(v: u16) -> Counts {
        Counts(v as u8)
    }
}

fn main() {}
