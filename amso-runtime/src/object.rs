//! What generic code knows of the array types: `ArrayType`, the element type and rank of a
//! `MemArray<T, N>` as values (the registry and the C ABI make arrays from them, written once),
//! and `ArrayObject`, type-erased access to a typed array for Rust callers such as the fuzzer.
//! The Python classes hold `ArrayCore`s, which carry the same operations without a trait.

use crate::dlpack::{ExportPlan, ExportSource};
use crate::element::{Element, ElementOps, Scalar};
use crate::error::Result;
use crate::lock::LockId;
use crate::memarray::access::RawView;
use crate::memarray::MemArray;

/// Type-erased access to an amso array.
pub trait ArrayObject {
    /// The array's facts (shape, dtype, residence, lock...).
    fn raw_view(&self) -> RawView<'_>;
    /// Read one element (Python-style index: negative counts from the end).
    fn get_scalar(&self, index: &[i64], lock: Option<LockId>) -> Result<Scalar>;
    /// Write one element.
    fn set_scalar(&mut self, index: &[i64], value: Scalar, lock: Option<LockId>) -> Result<()>;
    /// Describe the data for the DLPack export `plan`.
    fn export_source(&self, plan: &ExportPlan, lock: Option<LockId>) -> Result<ExportSource<'_>>;
}

impl<T: Element, const N: usize> ArrayObject for MemArray<T, N> {
    fn raw_view(&self) -> RawView<'_> {
        self.core().raw_view()
    }
    fn get_scalar(&self, index: &[i64], lock: Option<LockId>) -> Result<Scalar> {
        self.core().get_scalar(index, lock)
    }
    fn set_scalar(&mut self, index: &[i64], value: Scalar, lock: Option<LockId>) -> Result<()> {
        self.core_mut().set_scalar(index, value, lock)
    }
    fn export_source(&self, plan: &ExportPlan, lock: Option<LockId>) -> Result<ExportSource<'_>> {
        self.core().export_source(plan, lock)
    }
}

/// A concrete array type, as the values generic code works with: every `MemArray<T, N>`.
/// Generated code names it; it adds no code of its own.
pub trait ArrayType {
    /// The element type's table.
    const OPS: &'static ElementOps;
    /// Number of dimensions.
    const NDIM: usize;
}

impl<T: Element, const N: usize> ArrayType for MemArray<T, N> {
    const OPS: &'static ElementOps = ElementOps::of::<T>();
    const NDIM: usize = N;
}
