//! The bytes of a shared-array handle (`amso.cuda.SharedHandle`): who shared the array (user
//! and process), the export's random name, the GPU, the memory's and the event's CUDA IPC
//! handles, and the array over the memory (dtype, shape, read-only). A handle arrives from
//! another process, through a pickle or a pipe: `Handle::decode` refuses anything that is not
//! exactly one, and nothing in it is trusted until its export's folder agrees (`lease.rs`).

use crate::cuda::ipc::{HandleBytes, HANDLE_BYTES};

/// The first bytes of a handle of this format.
const MAGIC: &[u8; 8] = b"AMSOSHR2";

/// What a handle says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Handle {
    /// The exporter's user id: the owner its export's folder must have.
    pub(crate) uid: u32,
    /// The exporter's process id, for messages (whether it runs is its folder's lock's word).
    pub(crate) pid: u32,
    /// The export's number in its process, for messages.
    pub(crate) serial: u64,
    /// The export's random name, which names its folder (`folder_name`).
    pub(crate) token: [u8; 16],
    /// This handle's pending hold (`ExportFolder::mark_pending`).
    pub(crate) pending: u64,
    /// The UUID of the memory's GPU.
    pub(crate) uuid: [u8; 16],
    /// The size of the shared allocation.
    pub(crate) nbytes: u64,
    /// The allocation's CUDA IPC handle.
    pub(crate) memory: HandleBytes,
    /// The IPC handle of the event recorded after the exporter's work so far.
    pub(crate) event: HandleBytes,
    /// The array's dtype, by its spec name.
    pub(crate) dtype: String,
    /// The array's shape.
    pub(crate) dims: Vec<i64>,
    /// Whether the array is read-only.
    pub(crate) readonly: bool,
}

impl Handle {
    /// The handle's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.uid.to_le_bytes());
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.serial.to_le_bytes());
        out.extend_from_slice(&self.token);
        out.extend_from_slice(&self.pending.to_le_bytes());
        out.extend_from_slice(&self.uuid);
        out.extend_from_slice(&self.nbytes.to_le_bytes());
        out.extend_from_slice(&self.memory);
        out.extend_from_slice(&self.event);
        out.push(self.dtype.len() as u8); // a spec name: short (checked where made)
        out.extend_from_slice(self.dtype.as_bytes());
        out.push(self.dims.len() as u8);
        for dim in &self.dims {
            out.extend_from_slice(&dim.to_le_bytes());
        }
        out.push(self.readonly as u8);
        out
    }

    /// Read a handle's bytes, refusing anything that is not exactly one.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Handle, String> {
        let mut rest = bytes;
        let mut take = |n: usize| -> Result<&[u8], String> {
            if rest.len() < n {
                return Err(format!("it is truncated ({} bytes)", bytes.len()));
            }
            let (head, tail) = rest.split_at(n);
            rest = tail;
            Ok(head)
        };
        if take(8)? != MAGIC {
            return Err("it does not start as an amso handle of this version does".into());
        }
        let u32_at = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
        let u64_at = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let uid = u32_at(take(4)?);
        let pid = u32_at(take(4)?);
        let serial = u64_at(take(8)?);
        let token: [u8; 16] = take(16)?.try_into().expect("16 bytes");
        let pending = u64_at(take(8)?);
        let uuid: [u8; 16] = take(16)?.try_into().expect("16 bytes");
        let nbytes = u64_at(take(8)?);
        let memory: HandleBytes = take(HANDLE_BYTES)?.try_into().expect("64 bytes");
        let event: HandleBytes = take(HANDLE_BYTES)?.try_into().expect("64 bytes");
        let name_len = take(1)?[0] as usize;
        let dtype = String::from_utf8(take(name_len)?.to_vec()).map_err(|_| "its dtype is not text".to_string())?;
        let ndim = take(1)?[0] as usize;
        if !(1..=crate::shape::MAX_NDIM).contains(&ndim) {
            return Err(format!("its ndim {ndim} is outside 1..={}", crate::shape::MAX_NDIM));
        }
        let mut dims = Vec::with_capacity(ndim);
        for _ in 0..ndim {
            dims.push(i64::from_le_bytes(take(8)?.try_into().expect("8 bytes")));
        }
        let readonly = match take(1)?[0] {
            0 => false,
            1 => true,
            other => return Err(format!("its read-only flag is {other}")),
        };
        if !rest.is_empty() {
            return Err(format!("it has {} bytes after its end", rest.len()));
        }
        Ok(Handle { uid, pid, serial, token, pending, uuid, nbytes, memory, event, dtype, dims, readonly })
    }

    /// What the export's folder records, for importers to check a handle against: the
    /// handle's bytes without what differs from one `share()` to the next (the pending hold,
    /// the event) or is checked apart (the GPU's UUID). It names the exporter, the memory (its
    /// size and IPC handle) and the array over it, so that a handle whose description was
    /// altered names no export.
    pub(crate) fn record(&self) -> Vec<u8> {
        Handle { pending: 0, uuid: [0; 16], event: [0; HANDLE_BYTES], ..self.clone() }.encode()
    }

    /// The name of the export's folder: `amso-shared-UID-TOKEN`, which nobody can guess
    /// before the exporter makes it.
    pub(crate) fn folder_name(&self) -> String {
        folder_name(self.uid, &self.token)
    }
}

/// Decode `bytes` as a handle, then encode it again: the bytes and its folder's name, or why it
/// is no handle (for the fuzz target, through `__private`).
pub fn round_trip(bytes: &[u8]) -> Result<(Vec<u8>, String), String> {
    let handle = Handle::decode(bytes)?;
    Ok((handle.encode(), handle.folder_name()))
}

/// The prefix of every export folder's name.
pub(crate) const FOLDER_PREFIX: &str = "amso-shared-";

/// The folder name of `uid`'s export `token`.
pub(crate) fn folder_name(uid: u32, token: &[u8; 16]) -> String {
    format!("{FOLDER_PREFIX}{uid}-{}", hex(token))
}

/// `bytes` in lowercase hexadecimal, for the random parts of names.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Handle {
        Handle {
            uid: 1000,
            pid: 42,
            serial: 3,
            token: [7; 16],
            pending: 5,
            uuid: [9; 16],
            nbytes: 4096,
            memory: [1; HANDLE_BYTES],
            event: [2; HANDLE_BYTES],
            dtype: "float32".into(),
            dims: vec![32, 32],
            readonly: false,
        }
    }

    #[test]
    fn handles_round_trip_and_every_damage_is_refused() {
        let bytes = sample().encode();
        assert_eq!(Handle::decode(&bytes), Ok(sample()));
        for cut in 0..bytes.len() {
            assert!(Handle::decode(&bytes[..cut]).is_err(), "a handle cut at {cut} reads");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Handle::decode(&longer).unwrap_err().contains("after its end"));
        let mut wrong = bytes.clone();
        wrong[0] ^= 1;
        assert!(Handle::decode(&wrong).unwrap_err().contains("amso handle"));
        let mut flag = bytes;
        *flag.last_mut().unwrap() = 2;
        assert!(Handle::decode(&flag).unwrap_err().contains("read-only flag"));
    }

    #[test]
    fn the_record_leaves_out_what_differs_between_shares() {
        let mut other = sample();
        other.pending = 77;
        other.event = [3; HANDLE_BYTES];
        other.uuid = [1; 16];
        assert_eq!(other.record(), sample().record());
        other.nbytes += 1;
        assert_ne!(other.record(), sample().record());
    }

    #[test]
    fn folder_names_carry_the_user_and_the_token() {
        assert_eq!(sample().folder_name(), format!("amso-shared-1000-{}", "07".repeat(16)));
    }
}
