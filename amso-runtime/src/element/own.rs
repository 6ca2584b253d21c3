//! Element types of the extension's own (`#[derive(Element)]` or a hand-written impl), made
//! known to the lookups by name and DLPack type when the extension first uses them: in a
//! typed argument, a new array, or a class it registers. Up to `own::CAPACITY` types.

use std::sync::atomic::{AtomicPtr, Ordering};
#[cfg(feature = "python")]
use std::sync::Mutex;

use super::DType;
#[cfg(feature = "python")]
use super::{ArrayElement, DTypeOf};

pub(crate) const CAPACITY: usize = 64;

static TYPES: [AtomicPtr<DType>; CAPACITY] = [const { AtomicPtr::new(std::ptr::null_mut()) }; CAPACITY];
#[cfg(feature = "python")]
static APPENDING: Mutex<()> = Mutex::new(());

/// The types met so far, without locking (slots fill once, in order).
pub(crate) fn registered() -> impl Iterator<Item = &'static DType> {
    TYPES.iter().map(|slot| slot.load(Ordering::Acquire)).take_while(|p| !p.is_null()).map(|p| {
        // SAFETY: slots only ever hold `&'static DType`s (below).
        unsafe { &*p }
    })
}

/// Make `T` known, unless it is the spec's or already known. Free for the spec's types.
#[cfg(feature = "python")]
#[inline]
pub(crate) fn register<T: ArrayElement>() {
    // NumPy's own kinds are matched by their NumPy name, never looked up.
    if T::IN_SPEC || const { T::DTYPE.numpy_only() } || registered().any(|d| *d == T::DTYPE) {
        return;
    }
    note(DTypeOf::<T>::REF);
}

/// Make `dtype` known, unless the lookups find it already.
#[cfg(feature = "python")]
#[cold]
pub(crate) fn note(dtype: &'static DType) {
    if super::ALL.contains(&dtype) {
        return;
    }
    let _appending = APPENDING.lock().unwrap_or_else(|e| e.into_inner());
    for slot in &TYPES {
        let current = slot.load(Ordering::Acquire);
        if current.is_null() {
            slot.store((dtype as *const DType).cast_mut(), Ordering::Release);
            return;
        }
        // SAFETY: as in `registered`.
        if unsafe { *current } == *dtype {
            return;
        }
    }
    // Full: lookups by NumPy name or typestr miss this type, and say so in their errors;
    // typed arguments over it still work through DLPack producers.
}
