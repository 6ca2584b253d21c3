// #[derive(Element)] wraps plain numbers only: not every bit pattern of a `char` is a value.
use amso_macros::Element;

#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(transparent)]
#[amso(name = "letter", code = kDLUInt, bits = 32, scalar = u32)]
pub struct Letter(char);

impl From<Letter> for u32 {
    fn from(l: Letter) -> u32 {
        l.0 as u32
    }
}
impl From<u32> for Letter {
    fn from(v: u32) -> Letter {
        Letter(char::from_u32(v).unwrap_or_default())
    }
}

fn main() {}
