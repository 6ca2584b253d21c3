//! What an allocation asks the process's pool for: the kind of memory (`Request`), and who asks
//! (`Client`: amso's arrays, or a library plugged into amso). Both cross the pool's C table as
//! numbers.

/// Which memory an allocation asks for.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// The current allocator's (amso's pool, or the one plugged in).
    Current = 0,
    /// CUDA managed memory.
    Managed = 1,
    /// Memory other processes can map (`cuMemAlloc`).
    Shareable = 2,
}

/// Who asked: amso's arrays, or another library through its plug-in. Statistics count each.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Client {
    /// amso's own arrays, in any copy of the runtime.
    Amso = 0,
    /// Numba (`amso.allocators.NumbaManager`).
    Numba = 1,
    /// CuPy (`amso.allocators.cupy_malloc`).
    CuPy = 2,
    /// PyTorch (`amso.allocators.torch_allocator()`).
    Torch = 3,
    /// RMM (`amso.allocators.rmm_resource()`).
    Rmm = 4,
}

/// The clients' names, by number.
pub(crate) const CLIENTS: [&str; 5] = ["amso", "numba", "cupy", "torch", "rmm"];

impl Client {
    /// The client numbered `number`, if any.
    pub(crate) fn from_number(number: u32) -> Option<Client> {
        [Client::Amso, Client::Numba, Client::CuPy, Client::Torch, Client::Rmm]
            .into_iter()
            .find(|c| *c as u32 == number)
    }
}
