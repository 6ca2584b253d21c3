//! The records of `specs/types.yaml` as Rust structs: `#[repr(C)]`, laid out as the generator
//! computed (asserted at compile time), each an [`ArrayElement`](crate::element::ArrayElement) whose
//! `DType` lists its fields ([`Field`](crate::element::Field)). `records::Particle` is the bundled
//! `particle`. A crate's own records come from `#[derive(amso_macros::Element)]` on a
//! `#[repr(C)]` struct.

// SAFETY (every unsafe block and impl in the generated file): each struct is `#[repr(C)]` over
// element types of the spec, whose all-zero bits are a value (`Default` is `zeroed`) and whose
// every value is valid for the bytes a NumPy array of the field's dtype holds; the DType's size,
// alignment and offsets are asserted at compile time beside each impl.
#[allow(clippy::undocumented_unsafe_blocks)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/record_impls.rs"));
}

pub use generated::*;

/// The typestr `|V<size>` of a record of `size` bytes, NUL-padded (`#[derive(Element)]` keeps
/// it in a static and reads it with [`record_typestr`]).
#[doc(hidden)]
pub const fn record_typestr_bytes(size: usize) -> [u8; 24] {
    let mut bytes = [0u8; 24];
    bytes[0] = b'|';
    bytes[1] = b'V';
    let mut digits = 1;
    let mut rest = size / 10;
    while rest > 0 {
        digits += 1;
        rest /= 10;
    }
    let mut value = size;
    let mut at = 2 + digits;
    while at > 2 {
        at -= 1;
        bytes[at] = b'0' + (value % 10) as u8;
        value /= 10;
    }
    bytes
}

/// The text of [`record_typestr_bytes`]' result, up to its first NUL.
#[doc(hidden)]
pub const fn record_typestr(bytes: &'static [u8; 24]) -> &'static str {
    let mut length = 0;
    while length < bytes.len() && bytes[length] != 0 {
        length += 1;
    }
    match core::str::from_utf8(bytes.split_at(length).0) {
        Ok(text) => text,
        Err(_) => panic!("a typestr is ASCII"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::ArrayElement;

    #[test]
    fn particle_is_laid_out_as_the_generator_and_c_lay_it_out() {
        use core::mem::{align_of, offset_of, size_of};
        // The numbers of C's layout of { float pos[3]; float vel[3]; double mass; int64_t id; }.
        assert_eq!((size_of::<Particle>(), align_of::<Particle>()), (40, 8));
        let offsets = [
            offset_of!(Particle, pos),
            offset_of!(Particle, vel),
            offset_of!(Particle, mass),
            offset_of!(Particle, id),
        ];
        assert_eq!(offsets, [0, 12, 24, 32]);
        let dtype = &Particle::DTYPE;
        assert!(dtype.is_record());
        assert_eq!((dtype.name, dtype.code, dtype.bits, dtype.lanes, dtype.itemsize()), ("particle", 3, 8, 40, 40));
        assert_eq!(
            (dtype.numpy, dtype.numpy_module, dtype.c_type, dtype.typestr),
            ("record", None, "amso_particle_t", "|V40")
        );
        let described: Vec<_> = dtype.fields.iter().map(|f| (f.name, f.dtype.name, f.shape, f.offset)).collect();
        assert_eq!(
            described,
            [
                ("pos", "float32", &[3][..], 0),
                ("vel", "float32", &[3][..], 12),
                ("mass", "float64", &[][..], 24),
                ("id", "int64", &[][..], 32)
            ]
        );
        let particle = Particle { pos: [1.0, 2.0, 3.0], vel: [0.0; 3], mass: 2.5, id: 7 };
        assert_eq!(Particle::default(), Particle { pos: [0.0; 3], vel: [0.0; 3], mass: 0.0, id: 0 });
        assert_ne!(particle, Particle::default());
    }

    #[test]
    fn typestrs_are_the_size_in_bytes() {
        static FORTY: [u8; 24] = record_typestr_bytes(40);
        static ONE: [u8; 24] = record_typestr_bytes(1);
        static BIG: [u8; 24] = record_typestr_bytes(65535);
        assert_eq!([record_typestr(&FORTY), record_typestr(&ONE), record_typestr(&BIG)], ["|V40", "|V1", "|V65535"]);
    }
}
