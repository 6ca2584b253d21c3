//! Which array library a result goes to ([`Framework`]): named, or the framework of the
//! call's arguments.

use dlpark::ffi::DLPackExchangeAPI;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;

use crate::device::{Device, DeviceType};
use crate::python::identity_cache::IdentityCache;
use crate::python::source::{self, Protocol};

/// The array library a result goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    /// `numpy.ndarray` (host memory only).
    NumPy,
    /// `torch.Tensor`.
    Torch,
    /// `cupy.ndarray` (CUDA memory only).
    CuPy,
    /// `jax.Array`.
    Jax,
    /// `tvm_ffi.Tensor`.
    TvmFfi,
    /// amso's `MemArray` classes.
    Amso,
    /// Another type with a DLPack C exchange table (one amso does not know by name): results
    /// are made and wrapped through that table.
    Exchange(ExchangeTable),
}

/// A producer type's DLPack C exchange table, which lives for the process.
#[derive(Debug, Clone, Copy)]
pub struct ExchangeTable(&'static DLPackExchangeAPI);

impl PartialEq for ExchangeTable {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for ExchangeTable {}

impl std::str::FromStr for Framework {
    type Err = PyErr;

    /// `"numpy"`, `"torch"`, `"cupy"`, `"jax"`, `"tvm_ffi"` or `"amso"`.
    fn from_str(name: &str) -> PyResult<Framework> {
        Ok(match name {
            "numpy" => Framework::NumPy,
            "torch" => Framework::Torch,
            "cupy" => Framework::CuPy,
            "jax" => Framework::Jax,
            "tvm_ffi" => Framework::TvmFfi,
            "amso" => Framework::Amso,
            other => {
                return Err(PyValueError::new_err(format!(
                "unknown framework {other:?}; expected one of \"numpy\", \"torch\", \"cupy\", \"jax\", \"tvm_ffi\", \
                     \"amso\""
            )))
            }
        })
    }
}

/// A framework named from Python by its module's name (`"numpy"`, `"torch"`, ...).
impl<'a, 'py> FromPyObject<'a, 'py> for Framework {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let name = obj.extract::<pyo3::pybacked::PyBackedStr>().map_err(|_| {
            PyTypeError::new_err(format!(
                "a framework is named by a str such as \"numpy\" or \"torch\", got {}",
                obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
            ))
        })?;
        name.parse()
    }
}

/// The frameworks of the types seen so far (by type; tag 1 of the cache).
pub(in crate::python::args) static FRAMEWORKS: IdentityCache<64> = IdentityCache::new();

impl Framework {
    /// The framework of `obj`, an array argument whose data is on `device`: amso arrays of
    /// any crate, NumPy arrays (and subclasses), torch, CuPy, JAX and TVM-FFI by their types,
    /// other producers with an exchange table by that table; anything else gives NumPy arrays
    /// for host data and amso arrays for device data.
    pub(crate) fn of(obj: &Bound<'_, PyAny>, device: Device) -> PyResult<Framework> {
        let ty = obj.get_type();
        if let Some(code) = FRAMEWORKS.get(ty.as_any(), 1) {
            return Ok(Framework::decode(code).unwrap_or(Self::fallback(device)));
        }
        let found = Self::classify(obj)?;
        FRAMEWORKS.insert(ty.as_any(), 1, found.map_or(0, Framework::encode));
        Ok(found.unwrap_or(Self::fallback(device)))
    }

    fn fallback(device: Device) -> Framework {
        if device.device_type == DeviceType::Cuda {
            Framework::Amso
        } else {
            Framework::NumPy
        }
    }

    fn classify(obj: &Bound<'_, PyAny>) -> PyResult<Option<Framework>> {
        match source::protocol_of(obj)? {
            Some(Protocol::Amso(_)) => return Ok(Some(Framework::Amso)),
            Some(Protocol::NumPy) => return Ok(Some(Framework::NumPy)),
            _ => {}
        }
        let module: String = obj.get_type().getattr(intern!(obj.py(), "__module__"))?.extract().unwrap_or_default();
        let named = match module.split('.').next().unwrap_or("") {
            "torch" => Some(Framework::Torch),
            "cupy" | "cupy_backends" => Some(Framework::CuPy),
            "jax" | "jaxlib" => Some(Framework::Jax),
            "tvm_ffi" => Some(Framework::TvmFfi),
            _ => None,
        };
        Ok(match named {
            Some(framework) => Some(framework),
            None => {
                source::exchange_api_of_type(&obj.get_type())?.map(|table| Framework::Exchange(ExchangeTable(table)))
            }
        })
    }

    fn encode(self) -> usize {
        match self {
            Framework::NumPy => 1,
            Framework::Torch => 2,
            Framework::CuPy => 3,
            Framework::Jax => 4,
            Framework::TvmFfi => 5,
            Framework::Amso => 6,
            Framework::Exchange(ExchangeTable(table)) => table as *const DLPackExchangeAPI as usize,
        }
    }

    fn decode(code: usize) -> Option<Framework> {
        Some(match code {
            0 => return None,
            1 => Framework::NumPy,
            2 => Framework::Torch,
            3 => Framework::CuPy,
            4 => Framework::Jax,
            5 => Framework::TvmFfi,
            6 => Framework::Amso,
            // SAFETY: any other code is the address of a static exchange table (`encode`).
            table => Framework::Exchange(ExchangeTable(unsafe { &*(table as *const DLPackExchangeAPI) })),
        })
    }

    /// The framework's DLPack exchange table, if it has one (looked up on its array type).
    /// amso arrays are made by `core_into_framework`, which knows this module's classes.
    pub(in crate::python::args) fn exchange_table(
        self,
        py: Python<'_>,
    ) -> PyResult<Option<&'static DLPackExchangeAPI>> {
        let (module, class) = match self {
            Framework::Exchange(ExchangeTable(table)) => return Ok(Some(table)),
            Framework::Torch => ("torch", "Tensor"),
            Framework::TvmFfi => ("tvm_ffi", "Tensor"),
            Framework::NumPy | Framework::CuPy | Framework::Jax | Framework::Amso => return Ok(None),
        };
        let class = py.import(module)?.getattr(class)?;
        source::exchange_api_of_type(class.cast::<pyo3::types::PyType>()?)
    }

    /// The framework's `from_dlpack`, for frameworks without an exchange table.
    pub(in crate::python::args) fn dlpack_importer(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        let (module, function) = match self {
            Framework::NumPy => ("numpy", "from_dlpack"),
            Framework::Torch => ("torch", "from_dlpack"),
            Framework::CuPy => ("cupy", "from_dlpack"),
            Framework::Jax => ("jax.dlpack", "from_dlpack"),
            Framework::TvmFfi => ("tvm_ffi", "from_dlpack"),
            // The bundled module, which may compile (dtype, ndim) pairs this one does not.
            Framework::Amso | Framework::Exchange(_) => ("amso", "from_dlpack"),
        };
        py.import(module)?.getattr(function)
    }

    /// Refuse device data for NumPy and host data for CuPy.
    pub(in crate::python::args) fn check_device(self, device: Device) -> PyResult<()> {
        let on_device = device.device_type == DeviceType::Cuda;
        match self {
            Framework::NumPy if on_device => Err(PyValueError::new_err(format!(
                "NumPy arrays hold host memory, and this result is on cuda:{}; return it in the caller's framework \
                 or as Framework::Amso, or copy it to the host first",
                device.id
            ))),
            Framework::CuPy if !on_device => Err(PyValueError::new_err(
                "CuPy arrays hold CUDA memory, and this result is on the host; return it as Framework::NumPy, or \
                 move it to the device first",
            )),
            _ => Ok(()),
        }
    }
}
