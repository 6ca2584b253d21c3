//! `#[derive(Element)]` on a `#[repr(C)]` struct of named fields: a record whose `DType` states
//! the compiler's layout, field by field (the mistakes are compile-fail cases in `tests/ui/`).

use std::mem::{offset_of, size_of};

use amso_macros::Element;
use amso_runtime::{ArrayElement, DType};

/// The bundled spec's particle, declared by a user crate.
#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(C)]
pub struct Particle {
    pos: [f32; 3],
    vel: [f32; 3],
    mass: f64,
    id: i64,
}

/// C pads `b` to 8 and the size to 16; nested arrays are a multi-dimensional shape.
#[derive(Clone, Copy, Debug, Default, Element)]
#[repr(C)]
#[amso(name = "padded_cell")]
pub struct Padded {
    a: i8,
    b: f64,
    grid: [[amso_runtime::dtypes::float16; 3]; 2],
}

#[test]
fn a_derived_record_matches_the_spec_records_convention() {
    let dtype: &DType = &Particle::DTYPE;
    assert_eq!((dtype.name, dtype.code, dtype.bits, dtype.lanes, dtype.itemsize()), ("particle", 3, 8, 40, 40));
    assert_eq!(
        (dtype.numpy, dtype.numpy_module, dtype.c_type, dtype.typestr),
        ("record", None, "amso_particle_t", "|V40")
    );
    let fields: Vec<_> = dtype.fields.iter().map(|f| (f.name, f.dtype.name, f.shape, f.offset)).collect();
    assert_eq!(
        fields,
        [
            ("pos", "float32", &[3][..], 0),
            ("vel", "float32", &[3][..], 12),
            ("mass", "float64", &[][..], 24),
            ("id", "int64", &[][..], 32)
        ]
    );
    // The same DType as the runtime's own records::Particle, which the spec generates.
    assert_eq!(dtype, &amso_runtime::records::Particle::DTYPE);
}

#[test]
fn padding_is_in_the_size_and_nested_arrays_are_shapes() {
    let dtype = &Padded::DTYPE;
    assert_eq!(
        (dtype.name, dtype.c_type, dtype.typestr, dtype.lanes as usize),
        ("padded_cell", "amso_padded_cell_t", "|V32", size_of::<Padded>())
    );
    let fields: Vec<_> = dtype.fields.iter().map(|f| (f.name, f.dtype.name, f.shape, f.offset)).collect();
    assert_eq!(
        fields,
        [
            ("a", "int8", &[][..], 0),
            ("b", "float64", &[][..], offset_of!(Padded, b)),
            ("grid", "float16", &[2, 3][..], 16)
        ]
    );
    assert_eq!(offset_of!(Padded, b), 8);
    assert_eq!(dtype.fields[2].count(), 6);
}
