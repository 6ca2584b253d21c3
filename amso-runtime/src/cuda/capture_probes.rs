//! The other runtime copies' answers to "is a capture you saw in progress?" (`pool.rs`): each
//! copy notes only the captures it saw, and the process's pool holds every deferred free while
//! any copy's capture runs. Every free asks, so the set is read without a lock.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

/// A copy of the runtime's answer to "is a capture you saw in progress?" (non-zero: yes).
pub(crate) type CaptureProbe = extern "C" fn() -> std::ffi::c_int;

/// An append-only set of probes that every free reads without a lock (a copy stays loaded for
/// the process, so its probe stays valid): an array, the number of its slots published, and
/// the probes beyond its room, behind a lock.
pub(crate) struct Probes {
    slots: [AtomicPtr<()>; 16],
    published: AtomicUsize,
    more: Mutex<Vec<CaptureProbe>>,
    any_more: AtomicBool,
}

impl Probes {
    pub(crate) const fn new() -> Probes {
        Probes {
            slots: [const { AtomicPtr::new(std::ptr::null_mut()) }; 16],
            published: AtomicUsize::new(0),
            more: Mutex::new(Vec::new()),
            any_more: AtomicBool::new(false),
        }
    }

    pub(crate) fn add(&self, probe: CaptureProbe) {
        // Writers take the lock, so that each slot is written once before it is published.
        let mut more = self.more.lock().unwrap_or_else(|e| e.into_inner());
        let published = self.published.load(Ordering::Relaxed);
        match self.slots.get(published) {
            Some(slot) => {
                slot.store(probe as *mut (), Ordering::Relaxed);
                self.published.store(published + 1, Ordering::Release);
            }
            None => {
                more.push(probe);
                self.any_more.store(true, Ordering::Release);
            }
        }
    }

    /// Whether any probe answers yes.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        let published = self.published.load(Ordering::Acquire);
        for slot in &self.slots[..published] {
            // SAFETY: a slot below the published count holds a probe `add` stored (released by
            // the count), the function of a copy that stays loaded.
            let probe = unsafe { std::mem::transmute::<*mut (), CaptureProbe>(slot.load(Ordering::Relaxed)) };
            // A probe reads another copy's count of captures and takes no lock of this copy's.
            if probe() != 0 {
                return true;
            }
        }
        self.any_more.load(Ordering::Acquire)
            && self.more.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|probe| probe() != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::Probes;
    use std::sync::atomic::Ordering;

    #[test]
    fn every_copys_capture_probe_is_asked_beyond_the_arrays_room() {
        use std::sync::atomic::AtomicBool;
        static CAPTURING: AtomicBool = AtomicBool::new(false);
        extern "C" fn idle() -> std::ffi::c_int {
            0
        }
        extern "C" fn last() -> std::ffi::c_int {
            CAPTURING.load(Ordering::SeqCst).into()
        }
        let probes = Probes::new();
        assert!(!probes.any(), "no copy, no capture");
        // More copies than the array holds: the last probe is behind the lock.
        for _ in 0..probes.slots.len() {
            probes.add(idle);
        }
        probes.add(last);
        assert!(!probes.any(), "no probe says a capture runs");
        CAPTURING.store(true, Ordering::SeqCst);
        assert!(probes.any(), "the last copy's capture holds the frees");
        CAPTURING.store(false, Ordering::SeqCst);
        assert!(!probes.any());
    }
}
