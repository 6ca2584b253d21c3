//! Files in a folder every local user can write (`/dev/shm`), opened as untrusted. Another user
//! may have planted any name there first, as a link, a FIFO, a device or a folder of their own:
//! every open here follows no link (`O_NOFOLLOW`), never blocks (`O_NONBLOCK`: a FIFO opens and
//! reads at once), is closed on exec (`O_CLOEXEC`), and is checked with `fstat` (kind, owner,
//! mode, size) before anything is read from it. Files inside an export's folder are opened
//! relative to the folder's descriptor (`openat`), so that the folder checked is the folder
//! read, whatever its path names meanwhile.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a file was not opened: it is not there, it is not what amso makes (`Untrusted`, with
/// what is wrong), or the system refused.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// No file of that name (the export was released, or the name was never made).
    Missing,
    /// A file amso would not have made: what is wrong with it.
    Untrusted(String),
    /// The system's error (permission denied, say).
    Io(io::Error),
}

impl From<io::Error> for Refusal {
    fn from(error: io::Error) -> Refusal {
        match error.raw_os_error() {
            Some(libc::ENOENT) => Refusal::Missing,
            // O_NOFOLLOW on a link, O_DIRECTORY on something else.
            Some(libc::ELOOP) => Refusal::Untrusted("a symbolic link".into()),
            Some(libc::ENOTDIR) => Refusal::Untrusted("not a folder".into()),
            _ => Refusal::Io(error),
        }
    }
}

/// This process's effective user id, the owner of what it creates.
pub(crate) fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// `N` bytes from the system's random source, for names nobody can guess.
pub(crate) fn random_bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut out = [0u8; N];
    let mut filled = 0;
    while filled < N {
        // SAFETY: writes at most `N - filled` bytes into the rest of `out`.
        let got = unsafe { libc::getrandom(out[filled..].as_mut_ptr().cast(), N - filled, 0) };
        if got < 0 {
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        } else {
            filled += got as usize;
        }
    }
    Ok(out)
}

/// An open folder; files inside it are opened through its descriptor.
#[derive(Debug)]
pub(crate) struct Folder {
    fd: OwnedFd,
    path: PathBuf,
}

const OPEN_FLAGS: libc::c_int = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;

fn c_name(name: &str) -> io::Result<CString> {
    if name.contains('/') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a file name holds no '/'"));
    }
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a file name holds no NUL"))
}

impl Folder {
    /// The system folder export folders live in: `/dev/shm` where the system has it, else the
    /// temporary folder. It is the system's, and followed as the system names it.
    pub(crate) fn shared_memory() -> io::Result<Folder> {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            Folder::open_system(shm)
        } else {
            Folder::open_system(&std::env::temp_dir())
        }
    }

    /// The folder at `path`, a system folder (followed as the system names it).
    pub(crate) fn open_system(path: &Path) -> io::Result<Folder> {
        let path = path.to_path_buf();
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds no NUL"))?;
        // SAFETY: a NUL-terminated path; the result is a new descriptor or -1.
        let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        Ok(Folder { fd: owned(fd)?, path })
    }

    /// The same folder through a second descriptor.
    pub(crate) fn try_clone(&self) -> io::Result<Folder> {
        Ok(Folder { fd: self.fd.try_clone()?, path: self.path.clone() })
    }

    /// Where this folder is, for messages and for listing it.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The entry `name`'s descriptor, opened with `flags` and none of its links followed.
    fn open_at(&self, name: &str, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
        let c_name = c_name(name)?;
        // SAFETY: a live folder descriptor and a NUL-terminated name; a new descriptor or -1.
        owned(unsafe { libc::openat(self.fd.as_raw_fd(), c_name.as_ptr(), flags | OPEN_FLAGS, mode as libc::c_uint) })
    }

    /// The folder `name` inside this one, trusted only as a folder of `uid` that no one else
    /// may enter (mode 0700).
    pub(crate) fn open_folder(&self, name: &str, uid: u32) -> Result<Folder, Refusal> {
        // O_PATH: the folder is checked by its owner and mode even when this user may not
        // read it (another user's), and its entries are opened through the descriptor.
        // Without O_DIRECTORY, so that fstat tells a link from other things that are no folder.
        let fd = self.open_at(name, libc::O_PATH, 0)?;
        let folder = Folder { fd, path: self.path.join(name) };
        let metadata = folder.metadata()?;
        if metadata.file_type().is_symlink() {
            // O_PATH with O_NOFOLLOW opens a link itself rather than refusing it.
            return Err(Refusal::Untrusted("a symbolic link".into()));
        }
        if !metadata.is_dir() {
            return Err(Refusal::Untrusted("not a folder".into()));
        }
        check_owner(&metadata, uid)?;
        let mode = metadata.mode() & 0o7777;
        if mode != 0o700 {
            return Err(Refusal::Untrusted(format!("a folder of mode {mode:04o}, not 0700")));
        }
        Ok(folder)
    }

    /// A new folder `name` inside this one, for this process's user alone (mode 0700). A name
    /// that exists is `AlreadyExists`: it is never reused, whoever made it.
    pub(crate) fn create_folder(&self, name: &str) -> io::Result<Folder> {
        let c_name = c_name(name)?;
        // SAFETY: a live folder descriptor and a NUL-terminated name.
        if unsafe { libc::mkdirat(self.fd.as_raw_fd(), c_name.as_ptr(), 0o700) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // Its mode is set whatever the umask took, through a descriptor of the folder itself
        // (opened without following a link, as everything here).
        let made = File::from(self.open_at(name, libc::O_RDONLY | libc::O_DIRECTORY, 0)?);
        made.set_permissions(std::fs::Permissions::from_mode(0o700))?;
        self.open_folder(name, current_uid()).map_err(|refusal| match refusal {
            Refusal::Io(error) => error,
            other => io::Error::other(format!("the folder just made is not as made: {other:?}")),
        })
    }

    /// The regular file `name`, opened for reading, trusted only when `uid` owns it and no one
    /// else may read or write it.
    pub(crate) fn open_file(&self, name: &str, uid: u32) -> Result<File, Refusal> {
        let file = File::from(self.open_at(name, libc::O_RDONLY, 0)?);
        let metadata = file.metadata().map_err(Refusal::Io)?;
        if !metadata.file_type().is_file() {
            return Err(Refusal::Untrusted(kind_of(&metadata).into()));
        }
        check_owner(&metadata, uid)?;
        let mode = metadata.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(Refusal::Untrusted(format!("a file of mode {mode:04o}, open to other users")));
        }
        Ok(file)
    }

    /// The regular file `name` (checked as `open_file` checks), read up to `limit` bytes and
    /// one more: a planted large file costs no more than that, and one longer than `limit`
    /// shows as longer.
    pub(crate) fn read_file(&self, name: &str, uid: u32, limit: usize) -> Result<Vec<u8>, Refusal> {
        let file = self.open_file(name, uid)?;
        let mut contents = Vec::with_capacity(limit + 1);
        file.take(limit as u64 + 1).read_to_end(&mut contents).map_err(Refusal::Io)?;
        Ok(contents)
    }

    /// A new regular file `name` holding `contents`, for this process's user alone (mode
    /// 0600); a name that exists, a planted link included, is `AlreadyExists`.
    pub(crate) fn create_file(&self, name: &str, contents: &[u8]) -> io::Result<File> {
        use std::io::Write;
        let mut file = File::from(self.open_at(name, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600)?);
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?; // whatever the umask took
        file.write_all(contents)?;
        Ok(file)
    }

    /// Remove the file `name` (not a folder; a link is removed, not followed).
    pub(crate) fn remove_file(&self, name: &str) -> io::Result<()> {
        let c_name = c_name(name)?;
        // SAFETY: a live folder descriptor and a NUL-terminated name.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c_name.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The names in this folder.
    pub(crate) fn names(&self) -> io::Result<Vec<String>> {
        // By path: only folders this process checked are listed, and a folder of mode 0700 in
        // a sticky folder (as /dev/shm is) is renamed or replaced by its owner alone.
        Ok(std::fs::read_dir(&self.path)?.filter_map(|entry| entry.ok()?.file_name().into_string().ok()).collect())
    }

    /// The folder's `fstat` (an `O_PATH` descriptor allows it).
    fn metadata(&self) -> Result<std::fs::Metadata, Refusal> {
        self.fd.try_clone().and_then(|fd| File::from(fd).metadata()).map_err(Refusal::Io)
    }
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the system just opened for us and nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn check_owner(metadata: &std::fs::Metadata, uid: u32) -> Result<(), Refusal> {
    if metadata.uid() != uid {
        return Err(Refusal::Untrusted(format!("owned by uid {}, not uid {uid}", metadata.uid())));
    }
    Ok(())
}

/// What kind of file, for messages.
fn kind_of(metadata: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = metadata.file_type();
    match () {
        _ if kind.is_dir() => "a folder, not a file",
        _ if kind.is_fifo() => "a FIFO, not a file",
        _ if kind.is_char_device() || kind.is_block_device() => "a device, not a file",
        _ if kind.is_socket() => "a socket, not a file",
        _ => "not a regular file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removes a scratch folder when dropped.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A fresh private folder under the temporary folder.
    fn scratch() -> (Scratch, Folder) {
        let name = format!("amso-folder-test-{}", super::super::handle::hex(&random_bytes::<8>().unwrap()));
        let base = Folder::open_system(&std::env::temp_dir()).unwrap();
        let folder = base.create_folder(&name).unwrap();
        (Scratch(folder.path().to_path_buf()), folder)
    }

    #[test]
    fn files_are_read_only_when_they_are_what_amso_makes() {
        let (_guard, folder) = scratch();
        let uid = current_uid();
        folder.create_file("record", b"12345").unwrap();
        assert_eq!(folder.read_file("record", uid, 5).unwrap(), b"12345");
        assert_eq!(folder.read_file("record", uid, 3).unwrap(), b"1234", "one byte past the limit, no more");
        assert!(
            matches!(folder.read_file("record", uid + 1, 5), Err(Refusal::Untrusted(why)) if why.contains("owned by"))
        );
        assert!(matches!(folder.read_file("absent", uid, 5), Err(Refusal::Missing)));
        assert_eq!(folder.create_file("record", b"").unwrap_err().kind(), io::ErrorKind::AlreadyExists);

        std::os::unix::fs::symlink("/dev/zero", folder.path().join("zero")).unwrap();
        assert!(matches!(folder.read_file("zero", uid, 5), Err(Refusal::Untrusted(why)) if why.contains("link")));
        assert_eq!(folder.create_file("zero", b"").unwrap_err().kind(), io::ErrorKind::AlreadyExists);

        let fifo = CString::new(folder.path().join("fifo").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(matches!(folder.read_file("fifo", uid, 5), Err(Refusal::Untrusted(why)) if why.contains("FIFO")));

        std::fs::write(folder.path().join("open"), b"12345").unwrap();
        std::fs::set_permissions(folder.path().join("open"), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(folder.read_file("open", uid, 5), Err(Refusal::Untrusted(why)) if why.contains("0644")));
        assert!(matches!(folder.read_file("../x", uid, 5), Err(Refusal::Io(_))));
        folder.remove_file("record").unwrap();
        assert!(matches!(folder.read_file("record", uid, 5), Err(Refusal::Missing)));
    }

    #[test]
    fn folders_are_private_and_never_reused() {
        let (_guard, folder) = scratch();
        let uid = current_uid();
        let inner = folder.create_folder("inner").unwrap();
        inner.create_file("f", b"x").unwrap();
        assert_eq!(folder.open_folder("inner", uid).unwrap().names().unwrap(), vec!["f".to_string()]);
        assert_eq!(folder.create_folder("inner").unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        std::fs::create_dir(folder.path().join("open")).unwrap();
        std::fs::set_permissions(folder.path().join("open"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(folder.open_folder("open", uid), Err(Refusal::Untrusted(why)) if why.contains("0755")));
        std::os::unix::fs::symlink(folder.path().join("inner"), folder.path().join("link")).unwrap();
        assert!(matches!(folder.open_folder("link", uid), Err(Refusal::Untrusted(why)) if why.contains("link")));
        assert!(
            matches!(folder.open_folder("inner", uid + 1), Err(Refusal::Untrusted(why)) if why.contains("owned by"))
        );
    }

    #[test]
    fn random_names_differ() {
        assert_ne!(random_bytes::<16>().unwrap(), random_bytes::<16>().unwrap());
    }
}
