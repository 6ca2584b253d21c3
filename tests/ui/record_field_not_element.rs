// Each field of a record is an element type or a (nested) array of one: not a char, not
// another record (records of records are not supported yet).
use amso_macros::Element;

#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(C)]
pub struct Inner {
    a: f32,
}

#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(C)]
pub struct Outer {
    letters: [[char; 2]; 4],
    inner: Inner,
    ok: [u8; 3],
}

fn main() {}
