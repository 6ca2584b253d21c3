//! One record of the spec (`records:`): a C struct of scalar fields, and its C layout, computed
//! here once so that the Rust struct, `generated/amso.h` and `generated/amso.cuh` agree (each
//! asserts it at compile time) and the runtime's `DType::fields` states the same offsets.

use crate::dtype::{class_stem, DType, TypeCode};

/// One field of a record: an element type of the table, with a fixed shape, at its C offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordField {
    /// The field's name (a C and Rust identifier; NumPy's structured dtype names it so).
    pub name: String,
    /// The name of its element type (a scalar dtype of the table).
    pub dtype: String,
    /// Its fixed shape (empty for one element; `[3]` for `float pos[3]`).
    pub shape: Vec<usize>,
    /// Bytes from the record's start, as C lays it out.
    pub offset: usize,
}

impl RecordField {
    /// Elements in the field (the product of its shape).
    pub fn count(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A record: its fields in declaration order, with C's layout (offsets, size, alignment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record's name, e.g. `particle` (C's `amso_particle_t`, Rust's `Particle`).
    pub name: String,
    /// The fields, in declaration order.
    pub fields: Vec<RecordField>,
    /// Bytes per record, trailing padding included (a multiple of `align`).
    pub size: usize,
    /// Alignment: the largest of its fields'.
    pub align: usize,
}

impl Record {
    /// Lay out `fields` (name, dtype, shape) as C does: each field at the next multiple of its
    /// alignment, the size rounded up to the largest alignment. `dtype` finds a field's type
    /// (validated to be a scalar of the table).
    pub(crate) fn lay_out<'a>(
        name: String,
        fields: Vec<(String, String, Vec<usize>)>,
        dtype: impl Fn(&str) -> Option<&'a DType>,
    ) -> Record {
        let mut offset: usize = 0;
        let mut align: usize = 1;
        let fields = fields
            .into_iter()
            .map(|(field, type_name, shape)| {
                // A refused spec is not laid out; a missing type here is one byte, never a panic.
                let (size, field_align) = dtype(&type_name).map_or((1, 1), |d| (d.itemsize(), alignment(d)));
                offset = offset.next_multiple_of(field_align);
                align = align.max(field_align);
                let placed = RecordField { name: field, dtype: type_name, shape, offset };
                offset += size * placed.count();
                placed
            })
            .collect();
        Record { name, fields, size: offset.next_multiple_of(align), align }
    }

    /// The Rust struct's name: `particle` -> `Particle`.
    pub fn camel(&self) -> String {
        class_stem(&self.name)
    }

    /// Name of the bundled Python class for `ndim`: `MemArray1DParticle`.
    pub fn class_name(&self, ndim: u8) -> String {
        crate::dtype::class_name(&self.name, ndim)
    }

    /// The struct's member lines, `    float pos[3];`, each field's type named by `type_of` (C's
    /// or CUDA's name of its dtype).
    pub(crate) fn members<'a>(&self, spec: &'a crate::Spec, type_of: impl Fn(&'a DType) -> &'a str) -> String {
        let mut out = String::new();
        for field in &self.fields {
            let dtype = spec.dtype(&field.dtype).expect("validated: a field's dtype is in the table");
            let dims: String = field.shape.iter().map(|length| format!("[{length}]")).collect();
            out += &format!("    {} {}{dims};\n", type_of(dtype), field.name);
        }
        out
    }

    /// The C type in generated/amso.h: `amso_particle_t`.
    pub fn c_type(&self) -> String {
        format!("amso_{}_t", self.name)
    }

    /// The array-interface typestr of a record: `|V40`, its bytes.
    pub fn typestr(&self) -> String {
        format!("|V{}", self.size)
    }
}

/// The C alignment of one scalar element type on the targets amso builds for: its size, except
/// complex numbers, which align as their parts (C's `float _Complex` is two floats).
pub fn alignment(dtype: &DType) -> usize {
    match dtype.code {
        TypeCode::Complex => dtype.itemsize() / 2,
        _ => dtype.itemsize(),
    }
}
