//! The lease protocol of a shared export: its folder in `/dev/shm`, which tells importers that
//! the export exists and what it is, and tells the exporter who still holds it.
//!
//! The folder is `amso-shared-UID-TOKEN` (`handle::folder_name`), made by the exporter with a
//! random token, private to its user (mode 0700), and holds:
//! - `live`, locked (`flock`, exclusive) by the exporter for as long as the export exists: the
//!   exporter's proof of life. A lock is seen the same from every PID namespace that shares
//!   the folder, where a pid is not, and it goes with its process, however it ends.
//! - `lock`, taken briefly by the exporter to decide to free the export, and by an importer to
//!   check the record and mark its hold: the two never interleave.
//! - `record`, the handle's description (`Handle::record`), which a handle must match.
//! - `pending-N`, one per handle not opened yet, held for the pending lifetime.
//! - `importer-TOKEN`, one per importing process's mapping, locked by the importer while it
//!   maps the memory: a killed importer's lock is gone with it.
//!
//! Each user's exports are listed in an index, `amso-index-UID` (mode 0700, one empty file per
//! export folder), so that collecting the folders of dead exporters (`remove_stale`) reads this
//! user's own entries, never the whole of `/dev/shm`, where any local user can plant any number
//! of folders named after another user. An index another user took is not used: stale folders
//! are then left to the system's cleanup of `/dev/shm`, and nothing else changes.
//!
//! Everything in `/dev/shm` is read as untrusted (`folder.rs`): a folder or file that another
//! user planted, that is not the kind amso makes, or that is open to other users, is refused.
//! Every call here touches the file system: callers release the GIL first.

use std::fs::{File, TryLockError};
use std::io;
use std::time::{Duration, Instant};

use super::folder::{current_uid, random_bytes, Folder, Refusal};
use super::handle::{folder_name, hex, Handle, FOLDER_PREFIX};

/// How long a lock is waited for before giving up: a lock a forked child inherited mid-hold
/// must not hang anyone.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);
/// How old a folder without its `live` file must be to count as an abandoned, half-made export
/// (the exporter makes `live` right after the folder).
const HALF_MADE: Duration = Duration::from_secs(60);
/// How old a folder must be before its unlocked `live` file means its exporter is gone (the
/// exporter locks `live` right after making it).
const MAKING: Duration = Duration::from_secs(2);
/// The most seconds an environment setting may name (one day); larger values count as this.
pub(crate) const MAX_SECONDS: f64 = 86_400.0;

/// The index of this user's exports in `base` (made when `create`), if it is this user's.
fn index(base: &Folder, create: bool) -> Option<Folder> {
    let uid = current_uid();
    let name = format!("{INDEX_PREFIX}{uid}");
    match base.open_folder(&name, uid) {
        Ok(index) => Some(index),
        // Made here, or by another process of this user in the meantime.
        Err(Refusal::Missing) if create => base.create_folder(&name).ok().or_else(|| base.open_folder(&name, uid).ok()),
        Err(_) => None,
    }
}

/// The index folder's name before the user id.
pub(crate) const INDEX_PREFIX: &str = "amso-index-";

/// An export's folder, as its exporter holds it.
#[derive(Debug)]
pub(crate) struct ExportFolder {
    folder: Folder,
    /// `live`, locked while this value lives.
    _live: File,
    /// The user's index, where the folder's name is listed, and that name.
    index: Option<Folder>,
    name: String,
}

impl ExportFolder {
    /// A new export folder of this process's user in `base`, under a fresh random name, with
    /// `live` locked, `lock`, and `record` from `describe(token)`. A name that exists is never
    /// reused: another is drawn.
    pub(crate) fn create(
        base: &Folder,
        describe: impl FnOnce([u8; 16]) -> Vec<u8>,
    ) -> io::Result<(ExportFolder, [u8; 16])> {
        Self::create_with(base, random_bytes::<16>, describe)
    }

    /// `create`, drawing names from `tokens`.
    fn create_with(
        base: &Folder,
        mut tokens: impl FnMut() -> io::Result<[u8; 16]>,
        describe: impl FnOnce([u8; 16]) -> Vec<u8>,
    ) -> io::Result<(ExportFolder, [u8; 16])> {
        let uid = current_uid();
        let mut attempts = 0;
        let (folder, token, name) = loop {
            let token = tokens()?;
            let name = folder_name(uid, &token);
            match base.create_folder(&name) {
                Ok(folder) => break (folder, token, name),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 8 => attempts += 1,
                Err(e) => return Err(e),
            }
        };
        let made = (|| {
            let live = folder.create_file("live", b"")?;
            // Waited for: a prober (`locked_by_another`) may hold a shared lock for an instant.
            live.lock()?;
            folder.create_file("lock", b"")?;
            folder.create_file("record", &describe(token))?;
            Ok(live)
        })();
        match made {
            Ok(live) => {
                let index = index(base, true);
                let index = index.filter(|index| index.create_file(&name, b"").is_ok());
                Ok((ExportFolder { folder, _live: live, index, name }, token))
            }
            Err(error) => {
                let _ = std::fs::remove_dir_all(folder.path());
                Err(error)
            }
        }
    }

    /// Where the folder is, for messages.
    pub(crate) fn path(&self) -> &std::path::Path {
        self.folder.path()
    }

    /// Remove handle `pending`'s pending hold: the handle arrived.
    pub(crate) fn remove_pending(&self, pending: u64) {
        let _ = self.folder.remove_file(&pending_name(pending));
    }

    /// Mark handle `pending`'s hold (see `held`).
    pub(crate) fn mark_pending(&self, pending: u64) -> io::Result<()> {
        self.folder.create_file(&pending_name(pending), b"").map(drop)
    }

    /// The export's lock, waited for at most `LOCK_PATIENCE`.
    pub(crate) fn lock(&self) -> io::Result<File> {
        lock(&self.folder, current_uid())
    }

    /// Whether anything holds the export: an importer that still maps it, or (with
    /// `count_pending`) a handle shared less than `pending_lifetime` ago and not opened yet,
    /// which may be on its way to a process. Files of importers that are gone, stale pending
    /// holds and files amso did not make are removed on the way.
    pub(crate) fn held(&self, pending_lifetime: Duration, count_pending: bool) -> bool {
        let uid = current_uid();
        let Ok(names) = self.folder.names() else { return true };
        let mut held = false;
        for name in names {
            let kept = if name.starts_with("pending-") {
                let age = self
                    .folder
                    .open_file(&name, uid)
                    .ok()
                    .and_then(|f| f.metadata().ok()?.modified().ok()?.elapsed().ok());
                let fresh = age.is_some_and(|age| age < pending_lifetime);
                held |= fresh && count_pending;
                fresh
            } else if name.starts_with("importer-") {
                let alive = self.folder.open_file(&name, uid).is_ok_and(|file| locked_by_another(&file));
                held |= alive;
                alive
            } else {
                matches!(name.as_str(), "live" | "lock" | "record")
            };
            if !kept {
                let _ = self.folder.remove_file(&name);
            }
        }
        held
    }

    /// Remove the folder (the export is freed): importers find no export from now on.
    pub(crate) fn remove(&self) {
        let _ = std::fs::remove_dir_all(self.folder.path());
        if let Some(index) = &self.index {
            let _ = index.remove_file(&self.name);
        }
    }
}

/// An export's folder, as an importer checks it.
#[derive(Debug)]
pub(crate) struct ImportFolder {
    folder: Folder,
    uid: u32,
}

/// Why an importer refuses a handle before any driver call.
#[derive(Debug)]
pub(crate) enum ImportRefusal {
    /// The handle names another user's export: amso opens its own user's shares only.
    OtherUser,
    /// No export of that name (released, or the handle is damaged or forged).
    NoExport,
    /// The export's process is gone, and its memory with it.
    ExporterGone,
    /// Something in the folder is not what amso makes: planted by another user, or damaged.
    Untrusted(String),
    /// The handle does not match its export's record.
    Mismatch,
    /// The system refused (permission denied, say).
    Io(io::Error),
}

impl ImportFolder {
    /// The folder of `handle`'s export in `base`, with the exporter alive and the handle
    /// matching its record. Only this process's user's exports are opened.
    pub(crate) fn open(base: &Folder, handle: &Handle) -> Result<ImportFolder, ImportRefusal> {
        if handle.uid != current_uid() {
            return Err(ImportRefusal::OtherUser);
        }
        let folder = base.open_folder(&handle.folder_name(), handle.uid).map_err(|r| refusal("folder", r))?;
        let import = ImportFolder { folder, uid: handle.uid };
        let live = import.folder.open_file("live", import.uid).map_err(|r| refusal("live", r))?;
        if !locked_by_another(&live) {
            return Err(ImportRefusal::ExporterGone);
        }
        import.check_record(handle)?;
        Ok(import)
    }

    /// Refuse `handle` unless it matches the export's record.
    pub(crate) fn check_record(&self, handle: &Handle) -> Result<(), ImportRefusal> {
        let expected = handle.record();
        match self.folder.read_file("record", self.uid, expected.len()) {
            Ok(recorded) if recorded == expected => Ok(()),
            Ok(_) => Err(ImportRefusal::Mismatch),
            Err(other) => Err(refusal("record", other)),
        }
    }

    /// Mark this process's hold under the export's lock, after checking the record again
    /// under it: the exporter cannot free the export in between. The hold lasts while the
    /// returned value lives (`Hold::release` removes its file).
    pub(crate) fn hold(&self, handle: &Handle) -> Result<Hold, ImportRefusal> {
        let _locked = lock(&self.folder, self.uid).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => ImportRefusal::NoExport,
            _ => ImportRefusal::Io(e),
        })?;
        self.check_record(handle)?;
        let name = format!("importer-{}", hex(&random_bytes::<16>().map_err(ImportRefusal::Io)?));
        let file = self.folder.create_file(&name, b"").map_err(ImportRefusal::Io)?;
        file.try_lock().map_err(|e| ImportRefusal::Io(e.into()))?;
        Ok(Hold { folder: self.folder.try_clone().map_err(ImportRefusal::Io)?, name, _file: file })
    }

    /// Remove handle `pending`'s pending hold: the handle arrived.
    pub(crate) fn remove_pending(&self, pending: u64) {
        let _ = self.folder.remove_file(&pending_name(pending));
    }
}

/// An importer's hold of an export: its locked file in the export's folder.
#[derive(Debug)]
pub(crate) struct Hold {
    folder: Folder,
    name: String,
    _file: File,
}

impl Hold {
    /// End the hold (the mapping is gone).
    pub(crate) fn release(self) {
        let _ = self.folder.remove_file(&self.name);
    }
}

/// Remove the export folders of this user's exporters that no longer run (killed, or ended
/// without their exit hook): their memory went with them. A folder counts as dead only when
/// its `live` lock is free, whichever PID namespace its exporter ran in; other users' folders
/// and anything amso did not make are left alone.
pub(crate) fn remove_stale(base: &Folder) {
    let uid = current_uid();
    let prefix = format!("{FOLDER_PREFIX}{uid}-");
    let Some(index) = index(base, false) else { return };
    let Ok(names) = index.names() else { return };
    for name in names.into_iter().filter(|n| n.starts_with(&prefix)) {
        let folder = match base.open_folder(&name, uid) {
            Ok(folder) => folder,
            Err(Refusal::Missing) => {
                let _ = index.remove_file(&name); // its exporter removed it, and then died
                continue;
            }
            Err(_) => continue,
        };
        // A folder being made has `live` unlocked for an instant: only an older one counts.
        let made = std::fs::symlink_metadata(folder.path()).and_then(|m| m.modified()).ok();
        let old = |grace: Duration| made.and_then(|t| t.elapsed().ok()).is_some_and(|age| age > grace);
        let dead = match folder.open_file("live", uid) {
            Ok(live) => !locked_by_another(&live) && old(MAKING),
            Err(Refusal::Missing) => old(HALF_MADE),
            Err(_) => false,
        };
        if dead {
            let _ = std::fs::remove_dir_all(folder.path());
            let _ = index.remove_file(&name);
        }
    }
}

/// A number of seconds from environment variable `name` (`default` when unset): a finite
/// number, negative values counting as 0 and values above `MAX_SECONDS` as `MAX_SECONDS`.
pub(crate) fn seconds_from_env(name: &str, default: f64) -> Result<Duration, String> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(Duration::from_secs_f64(default)),
        Err(std::env::VarError::NotUnicode(value)) => Err(format!("{name}={value:?} is not a number of seconds")),
        Ok(value) => parse_seconds(&value).ok_or_else(|| {
            format!(
                "{name}={value:?} is not a number of seconds; give a finite number such as 60 (at most {MAX_SECONDS})"
            )
        }),
    }
}

/// `value` as seconds, clamped to `0..=MAX_SECONDS`; `None` unless a finite number.
fn parse_seconds(value: &str) -> Option<Duration> {
    let seconds: f64 = value.trim().parse().ok()?;
    seconds.is_finite().then(|| Duration::from_secs_f64(seconds.clamp(0.0, MAX_SECONDS)))
}

/// Take `folder`'s `lock`, waiting at most `LOCK_PATIENCE`. `NotFound` when the folder's
/// export was freed.
fn lock(folder: &Folder, uid: u32) -> io::Result<File> {
    let file = match folder.open_file("lock", uid) {
        Ok(file) => file,
        Err(Refusal::Missing) => return Err(io::ErrorKind::NotFound.into()),
        Err(Refusal::Io(e)) => return Err(e),
        Err(Refusal::Untrusted(why)) => return Err(io::Error::other(format!("its lock file is {why}"))),
    };
    let deadline = Instant::now() + LOCK_PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Err(TryLockError::WouldBlock) => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "the export stayed locked"));
            }
            Err(TryLockError::Error(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Whether another open of `file` holds its lock (a process that still runs).
fn locked_by_another(file: &File) -> bool {
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => true, // cannot tell: count it as alive, never free early
    }
}

fn pending_name(pending: u64) -> String {
    format!("pending-{pending}")
}

/// A refusal of the folder's entry `what` as an importer's.
fn refusal(what: &str, refusal: Refusal) -> ImportRefusal {
    match refusal {
        Refusal::Missing if what == "folder" => ImportRefusal::NoExport,
        Refusal::Missing => ImportRefusal::Untrusted(format!("its {what} file is missing")),
        Refusal::Untrusted(why) if what == "folder" => ImportRefusal::Untrusted(format!("it is {why}")),
        Refusal::Untrusted(why) => ImportRefusal::Untrusted(format!("its {what} file is {why}")),
        Refusal::Io(e) => ImportRefusal::Io(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_name_is_skipped_and_the_export_lives_by_its_lock() {
        let name = format!("amso-lease-test-{}", hex(&random_bytes::<8>().unwrap()));
        let scratch = std::env::temp_dir().join(name);
        std::fs::create_dir(&scratch).unwrap();
        let base = Folder::open_system(&scratch).unwrap();
        let uid = current_uid();
        let taken = [1u8; 16];
        std::fs::create_dir(scratch.join(folder_name(uid, &taken))).unwrap(); // planted first
        let mut draws = vec![[2u8; 16], taken].into_iter().rev();
        let (export, token) =
            ExportFolder::create_with(&base, || Ok(draws.next().unwrap()), |token| token.to_vec()).unwrap();
        assert_eq!(token, [2u8; 16], "the taken name was skipped");
        let handle = Handle {
            uid,
            pid: 1,
            serial: 1,
            token,
            pending: 0,
            uuid: [0; 16],
            nbytes: 0,
            memory: [0; crate::cuda::ipc::HANDLE_BYTES],
            event: [0; crate::cuda::ipc::HANDLE_BYTES],
            dtype: String::new(),
            dims: vec![1],
            readonly: false,
        };
        // The record is what `describe` wrote, so this handle does not match it, but the
        // exporter's lock says it lives.
        assert!(matches!(ImportFolder::open(&base, &handle), Err(ImportRefusal::Mismatch)));
        remove_stale(&base);
        assert!(export.path().is_dir(), "a live export was removed");
        export.remove();
        std::fs::remove_dir_all(&scratch).unwrap();
    }

    #[test]
    fn seconds_are_finite_and_clamped() {
        assert_eq!(parse_seconds("60"), Some(Duration::from_secs(60)));
        assert_eq!(parse_seconds(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse_seconds("-3"), Some(Duration::ZERO));
        assert_eq!(parse_seconds("1e20"), Some(Duration::from_secs(86_400)));
        for bad in ["inf", "-inf", "nan", "", "ten", "1e400"] {
            assert_eq!(parse_seconds(bad), None, "{bad:?}");
        }
    }
}
