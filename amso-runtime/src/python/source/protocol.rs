//! Which protocol a producer's type speaks (the module docs' order), worked out once per type
//! and cached by the type's identity, so a repeated call does no probing.

use dlpark::ffi::DLPackExchangeAPI;
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::{ffi, intern};

use super::{pep3118, Protocol};
use crate::dlpack::DLPACK_VERSION;
use crate::python::base::recognize::ArrayTypeInfo;
use crate::python::identity_cache::IdentityCache;

/// The protocols of the types seen so far: a table address (the exchange API) or a small code.
static PROTOCOLS: IdentityCache<64> = IdentityCache::new();

/// Table addresses and the small codes below share one word: the codes are below any address,
/// and an amso runtime's table is marked with the low bit (its address is aligned).
const AMSO: usize = 1;
const NUMPY: usize = 2;
const DLPACK: usize = 3;
const INTERFACE: usize = 4;
const BUFFER: usize = 5;

impl PartialEq for Protocol {
    fn eq(&self, other: &Self) -> bool {
        self.encode() == other.encode()
    }
}

impl Protocol {
    fn encode(self) -> usize {
        match self {
            Protocol::Amso(runtime) => runtime as *const ArrayTypeInfo as usize | AMSO,
            Protocol::NumPy => NUMPY,
            Protocol::DLPack => DLPACK,
            Protocol::Interface => INTERFACE,
            Protocol::Buffer => BUFFER,
            Protocol::Exchange(table) => table as *const DLPackExchangeAPI as usize,
        }
    }

    fn decode(value: usize) -> Protocol {
        match value {
            NUMPY => Protocol::NumPy,
            DLPACK => Protocol::DLPack,
            INTERFACE => Protocol::Interface,
            BUFFER => Protocol::Buffer,
            // SAFETY: a marked address is a runtime's static `ArrayTypeInfo` (`encode`).
            runtime if runtime & AMSO != 0 => Protocol::Amso(unsafe { &*((runtime & !AMSO) as *const ArrayTypeInfo) }),
            // SAFETY: any other value is the address of a static exchange table (below).
            table => Protocol::Exchange(unsafe { &*(table as *const DLPackExchangeAPI) }),
        }
    }
}

/// The protocol `obj` speaks. Types are classified once; an object that speaks a protocol only
/// through attributes of its own (not its type's) is probed every time.
#[inline]
pub(crate) fn protocol_of(obj: &Bound<'_, PyAny>) -> PyResult<Option<Protocol>> {
    let type_address = obj.get_type_ptr() as usize;
    if let Some(value) = PROTOCOLS.get_raw(type_address, 0) {
        return Ok(Some(Protocol::decode(value)));
    }
    if SPEAK_NONE.get_raw(type_address, 0).is_some() {
        return Ok(None);
    }
    let ty = obj.get_type();
    if let Some(protocol) = protocol_of_type(&ty)? {
        return Ok(Some(protocol));
    }
    let py = obj.py();
    if obj.hasattr(intern!(py, "__dlpack__"))? {
        return Ok(Some(Protocol::DLPack));
    }
    if obj.hasattr(intern!(py, "__cuda_array_interface__"))? {
        return Ok(Some(Protocol::Interface));
    }
    // An immutable type (list, tuple, int, ...: no attribute can be added to it later, nor to
    // its instances unless they have a `__dict__`) that speaks no protocol never will: the
    // lists and scalars an ArrayLike argument converts are classified once, not per call.
    // SAFETY: a live type object.
    let flags = unsafe { ffi::PyType_GetFlags(ty.as_ptr().cast()) };
    if flags & ffi::Py_TPFLAGS_IMMUTABLETYPE != 0
        && ty
            .getattr_opt(intern!(py, "__dictoffset__"))?
            .is_none_or(|offset| offset.extract::<isize>().is_ok_and(|o| o == 0))
    {
        SPEAK_NONE.insert(ty.as_any(), 0, 1);
    }
    Ok(None)
}

/// Immutable types whose instances speak no protocol (`protocol_of`'s negative cache).
static SPEAK_NONE: IdentityCache<32> = IdentityCache::new();

/// The protocol instances of `ty` speak, classified once per type.
fn protocol_of_type(ty: &Bound<'_, PyType>) -> PyResult<Option<Protocol>> {
    if let Some(value) = PROTOCOLS.get(ty.as_any(), 0) {
        return Ok(Some(Protocol::decode(value)));
    }
    let protocol = classify(ty)?;
    if let Some(protocol) = protocol {
        PROTOCOLS.insert(ty.as_any(), 0, protocol.encode());
    }
    Ok(protocol)
}

/// What a type's own attributes and slots say it speaks.
fn classify(ty: &Bound<'_, PyType>) -> PyResult<Option<Protocol>> {
    let py = ty.py();
    if let Some(runtime) = crate::python::base::recognize::runtime_of_type(ty) {
        return Ok(Some(Protocol::Amso(runtime)));
    }
    if crate::python::npyffi::is_array_type(ty) {
        return Ok(Some(Protocol::NumPy));
    }
    if let Some(table) = exchange_table(ty)? {
        return Ok(Some(Protocol::Exchange(table)));
    }
    if ty.hasattr(intern!(py, "__dlpack__"))? {
        return Ok(Some(Protocol::DLPack));
    }
    if ty.hasattr(intern!(py, "__cuda_array_interface__"))? {
        return Ok(Some(Protocol::Interface));
    }
    Ok(pep3118::exports_buffers(ty).then_some(Protocol::Buffer))
}

/// `type.__dlpack_c_exchange_api__`, if the type has a DLPack 1.x table.
fn exchange_table(ty: &Bound<'_, PyType>) -> PyResult<Option<&'static DLPackExchangeAPI>> {
    let Some(capsule) = ty.getattr_opt(intern!(ty.py(), "__dlpack_c_exchange_api__"))? else { return Ok(None) };
    // SAFETY: PyCapsule_IsValid accepts any object and never sets an exception.
    if unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), c"dlpack_exchange_api".as_ptr()) } != 1 {
        return Ok(None);
    }
    // SAFETY: a valid capsule of that name points at a table that lives for the process (the
    // DLPack contract for `__dlpack_c_exchange_api__`); the cache keeps its type alive too.
    let table = unsafe {
        &*ffi::PyCapsule_GetPointer(capsule.as_ptr(), c"dlpack_exchange_api".as_ptr()).cast::<DLPackExchangeAPI>()
    };
    Ok((table.header.version.major == DLPACK_VERSION.0 && (table as *const _ as usize) > BUFFER).then_some(table))
}

/// The exchange table of instances of `ty`, if they have one (results in their framework).
pub(crate) fn exchange_api_of_type(ty: &Bound<'_, PyType>) -> PyResult<Option<&'static DLPackExchangeAPI>> {
    Ok(match protocol_of_type(ty)? {
        Some(Protocol::Exchange(table)) => Some(table),
        _ => None,
    })
}
