//! What amso's pool has out on one device, kept under that device cache's lock
//! (`pool_allocator.rs`), so that an allocation or a free, and a lend to another library or its
//! give-back (`loans.rs`), each take that one lock: the bytes in use and the allocations served
//! by client, and the pool's blocks lent to other libraries, by address.

use super::address_map::AddressMap;
use super::request::{Client, CLIENTS};
use crate::stream::Stream;

/// One of the pool's blocks, lent to another library.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lent {
    pub(crate) bytes: usize,
    pub(crate) client: Client,
    /// The stream it was lent for (a protocol value), which its free is ordered after unless
    /// the client names another.
    pub(crate) stream: Stream,
    /// Told apart from later loans of the same address.
    pub(crate) serial: u64,
}

/// Serials of this ledger have the top bit set: never one of the ledger of other memory's
/// loans (`loans.rs`), whose serials count up from 1.
const SERIAL_TAG: u64 = 1 << 63;

/// One device's figures and loans (`#[repr(C)]`: in the order a lend reads them).
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Ledger {
    loans: AddressMap<Lent>,
    next_serial: u64,
    in_use: [usize; CLIENTS.len()],
    allocations: [u64; CLIENTS.len()],
}

impl Ledger {
    /// Count an allocation of `bytes` for `client`.
    pub(crate) fn allocated(&mut self, client: Client, bytes: usize) {
        self.in_use[client as usize] += bytes;
        self.allocations[client as usize] += 1;
    }

    /// Count a free of `bytes` of `client`.
    pub(crate) fn freed(&mut self, client: Client, bytes: usize) {
        let in_use = &mut self.in_use[client as usize];
        debug_assert!(*in_use >= bytes, "a free of {bytes} bytes of {client:?}, which has {in_use} in use");
        *in_use = in_use.saturating_sub(bytes);
    }

    /// Record the loan of `ptr` (`bytes` for `client`, on `stream`): its serial; None when the
    /// address is lent already (nothing is recorded).
    #[inline(always)]
    pub(crate) fn lend(&mut self, ptr: u64, bytes: usize, client: Client, stream: Stream) -> Option<u64> {
        self.next_serial += 1;
        let serial = SERIAL_TAG | self.next_serial;
        self.loans.insert(ptr, Lent { bytes, client, stream, serial }).then_some(serial)
    }

    /// Whether `ptr` is lent.
    pub(crate) fn holds(&self, ptr: u64) -> bool {
        self.loans.contains(ptr)
    }

    /// Take the loan of `ptr` out of the ledger with one lookup, unless `decide`, shown the
    /// loan, refuses (an error; the loan stays); None when `ptr` is not lent.
    #[inline(always)]
    pub(crate) fn take_if<D, E>(
        &mut self,
        ptr: u64,
        decide: impl FnOnce(&Lent) -> Result<D, E>,
    ) -> Option<Result<(Lent, D), E>> {
        self.loans.remove_if(ptr, decide)
    }

    /// Take every loan of `client` out of the ledger.
    pub(crate) fn take_client(&mut self, client: Client) -> Vec<(u64, Lent)> {
        self.loans.remove_where(|lent| lent.client == client)
    }

    /// Bytes in use and allocations served, by client.
    pub(crate) fn counts(&self) -> ([usize; CLIENTS.len()], [u64; CLIENTS.len()]) {
        (self.in_use, self.allocations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loan_is_recorded_once_and_taken_once() {
        let mut ledger = Ledger::default();
        let serial = ledger.lend(0x1000, 256, Client::Torch, Stream::reported(1)).expect("a first loan");
        assert!(serial & SERIAL_TAG != 0, "its serial is told from the other ledger's");
        assert!(ledger.lend(0x1000, 256, Client::CuPy, Stream::reported(1)).is_none(), "an address lent twice");
        let second = ledger.lend(0x2000, 64, Client::Torch, Stream::reported(1)).expect("another address");
        assert_ne!(second, serial);
        let refused =
            ledger.take_if(0x1000, |lent| if lent.client == Client::CuPy { Ok(()) } else { Err(lent.client) });
        assert!(matches!(refused, Some(Err(Client::Torch))), "a refusal names the loan's client");
        assert!(ledger.holds(0x1000), "a refused give-back leaves the loan");
        let taken = ledger.take_if(0x1000, |lent| Ok::<_, ()>(lent.bytes));
        assert!(matches!(taken, Some(Ok((Lent { serial: s, .. }, 256))) if s == serial));
        assert!(ledger.take_if(0x1000, |_| Ok::<_, ()>(())).is_none(), "taken once");
        assert_eq!(ledger.take_client(Client::Torch).len(), 1);
        assert!(!ledger.holds(0x2000));
    }

    #[test]
    fn counts_by_client_return_to_zero() {
        let mut ledger = Ledger::default();
        ledger.allocated(Client::CuPy, 300);
        ledger.allocated(Client::CuPy, 100);
        ledger.freed(Client::CuPy, 300);
        let (in_use, allocations) = ledger.counts();
        assert_eq!((in_use[Client::CuPy as usize], allocations[Client::CuPy as usize]), (100, 2));
        ledger.freed(Client::CuPy, 100);
        assert_eq!(ledger.counts().0, [0; CLIENTS.len()]);
    }
}
