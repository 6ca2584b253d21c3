//! What the locked part of a lend and its give-back costs (the cache's take and give, the
//! ledger's insert and removal), without a GPU: `locked_pair_ns`, run by hand (`--ignored`).

use super::*;
use crate::stream::Stream;

#[inline(never)]
fn pair(cache: &mut BlockCache<()>, ledger: &mut Ledger, (bytes, size): (usize, usize), stream: u64) {
    let ptr = cache.take_own(size, stream).unwrap();
    ledger.allocated(Client::Torch, bytes);
    let serial = ledger.lend(ptr, bytes, Client::Torch, Stream::reported(stream as i64)).unwrap();
    let (lent, ()) = ledger.take_if(ptr, |lent| if lent.serial == serial { Ok(()) } else { Err(()) }).unwrap().unwrap();
    ledger.freed(lent.client, lent.bytes);
    assert!(cache.give(ptr, size, stream, || true).is_none());
}

#[inline(never)]
fn cache_pair(cache: &mut BlockCache<()>, size: usize, stream: u64) {
    let ptr = cache.take_own(size, stream).unwrap();
    assert!(cache.give(ptr, size, stream, || true).is_none());
}

#[inline(never)]
fn ledger_pair(ledger: &mut Ledger, ptr: u64, stream: u64) {
    let serial = ledger.lend(ptr, 4096, Client::Torch, Stream::reported(stream as i64)).unwrap();
    let _ = ledger.take_if(ptr, |lent| if lent.serial == serial { Ok(()) } else { Err(()) }).unwrap().unwrap();
}

/// The locked part of a lend and its give-back, timed (`cargo test --release -p amso-runtime
/// --features cuda --lib -- --ignored --nocapture locked_pair_ns`; `AMSO_PAIRS` sets the
/// count, for callgrind).
#[test]
#[ignore]
fn locked_pair_ns() {
    let n: u64 = std::env::var("AMSO_PAIRS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000_000);
    for &(bytes, stream) in &[(65536usize, 7u64), (256 << 20, 7u64)] {
        let mut cache = BlockCache::<()>::new(usize::MAX);
        let mut ledger = Ledger::default();
        let size = block_size(bytes).unwrap();
        cache.add_segment(0x7000_0000_0000, size);
        assert!(cache.give(0x7000_0000_0000, size, stream, || true).is_none());
        for i in 0..64u64 {
            let _ = ledger.lend(0x1000_0000 + i * 4096, 512, Client::Torch, Stream::reported(9));
        }
        let start = std::time::Instant::now();
        for _ in 0..n {
            pair(&mut cache, &mut ledger, (bytes, size), stream);
        }
        let whole = start.elapsed().as_nanos() as f64 / n as f64;
        let start = std::time::Instant::now();
        for _ in 0..n {
            cache_pair(&mut cache, size, stream);
        }
        let cache_only = start.elapsed().as_nanos() as f64 / n as f64;
        let start = std::time::Instant::now();
        for i in 0..n {
            ledger_pair(&mut ledger, 0x7000_0000_0000 + (i & 1) * 65536, stream);
        }
        let ledger_only = start.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("{bytes} bytes: {whole:.1} ns per pair; cache {cache_only:.1}, ledger {ledger_only:.1}");
    }
}
