//! Where lockctl keeps its locks when no URL is given: an SQLite file in the user's
//! state directory, or with `--system` one file for every user of the machine.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::exit::{self, Failure};

/// `$XDG_STATE_HOME/lockctl/locks.db`, else `$HOME/.local/state/lockctl/locks.db`.
pub(crate) fn default_path() -> Result<PathBuf, Failure> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    let state = absolute("XDG_STATE_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".local/state")))
        .ok_or_else(|| {
            Failure::new(
                exit::USAGE,
                "no state directory for the default SQLite file: set HOME or XDG_STATE_HOME, or pass --url",
            )
        })?;
    Ok(state.join("lockctl").join("locks.db"))
}

/// The `sqlite://` URL of [`default_path`], its directory created.
pub(crate) fn default_url() -> Result<String, Failure> {
    let path = default_path()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|error| {
            Failure::new(
                exit::FAILED,
                format!("cannot create {}: {error}", dir.display()),
            )
        })?;
    }
    let path = path.to_str().filter(|p| !p.contains('?')).ok_or_else(|| {
        Failure::new(
            exit::USAGE,
            format!(
                "state directory {} cannot be used in a URL: pass --url",
                path.display()
            ),
        )
    })?;
    Ok(format!("sqlite://{path}"))
}

/// Where the machine-wide file lives unless `LOCKCTL_SYSTEM_DIR` says otherwise.
pub(crate) const SYSTEM_DIR: &str = "/run/lock/lockctl";

/// The machine-wide lock file (`--system`): `locks.db` in `$LOCKCTL_SYSTEM_DIR`,
/// else in [`SYSTEM_DIR`], both made if missing so that every user can use them.
///
/// The directory is made with mode 1777 (every user may add files, none may remove
/// another's), the file with mode 0666. Sharing a file among users must not let one
/// user redirect another's writes, so lockctl refuses a directory that is a symbolic
/// link, one that everybody may write without the sticky bit, one owned by another
/// user than root or you, and one everybody may write while the kernel follows other
/// users' symbolic links in sticky directories (`fs.protected_symlinks = 0`). A
/// directory writable by a group of users only (`install -d -m 2775 -g GROUP`) is
/// the way to share it among some users only, and avoids the sticky directory's
/// `fs.protected_regular` rule too (see the README).
pub(crate) fn system_url() -> Result<String, Failure> {
    let dir = std::env::var_os("LOCKCTL_SYSTEM_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from(SYSTEM_DIR), PathBuf::from);
    if !dir.is_absolute() {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "LOCKCTL_SYSTEM_DIR {} is not an absolute path",
                dir.display()
            ),
        ));
    }
    let failed = |what: String| Failure::new(exit::FAILED, format!("--system: {what}"));
    match std::fs::DirBuilder::new().mode(0o1777).create(&dir) {
        Ok(()) => {
            // The umask took bits away: every user must be able to add files.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))
                .map_err(|e| failed(format!("cannot open up {}: {e}", dir.display())))?;
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => {
            return Err(failed(format!(
                "cannot make {}: {error} (pass --url, or set LOCKCTL_SYSTEM_DIR)",
                dir.display()
            )))
        }
    }
    check_shared_dir(&dir)?;
    let path = dir.join("locks.db");
    make_shared_file(&path)?;
    let path = path.to_str().filter(|p| !p.contains('?')).ok_or_else(|| {
        Failure::new(
            exit::USAGE,
            format!("{} cannot be used in a URL: pass --url", path.display()),
        )
    })?;
    // The file exists: SQLite opens it without O_CREAT.
    Ok(format!("sqlite://{path}?mode=rw"))
}

/// Refuses a directory where another user could swap the lock file for a link.
fn check_shared_dir(dir: &Path) -> Result<(), Failure> {
    let refuse = |why: String| {
        Failure::new(
            exit::FAILED,
            format!("--system: refusing {}: {why}", dir.display()),
        )
    };
    let meta =
        std::fs::symlink_metadata(dir).map_err(|e| refuse(format!("cannot look at it: {e}")))?;
    if meta.file_type().is_symlink() {
        return Err(refuse("it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(refuse("it is not a directory".into()));
    }
    let mode = meta.mode();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != me {
        return Err(refuse(format!(
            "it belongs to user {}, who could point the lock file anywhere: have root make it (see lockctl's README)",
            meta.uid()
        )));
    }
    if mode & 0o002 != 0 {
        if mode & 0o1000 == 0 {
            return Err(refuse(
                "every user may write it and it lacks the sticky bit, so anyone could replace the lock file"
                    .into(),
            ));
        }
        let protected = std::fs::read_to_string("/proc/sys/fs/protected_symlinks")
            .is_ok_and(|v| v.trim() != "0");
        if !protected {
            return Err(refuse(
                "every user may write it and this kernel follows other users' symbolic links there (fs.protected_symlinks = 0): use a directory only a group may write (see lockctl's README), or --url"
                    .into(),
            ));
        }
    }
    // SAFETY: access(2) on a path made from a Path without NUL bytes.
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| refuse("its name holds a NUL byte".into()))?;
    if unsafe { libc::access(c_dir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(refuse(format!(
            "you may not write it (mode {:o}, owner {}, group {}): SQLite makes its journal files there",
            mode & 0o7777,
            meta.uid(),
            meta.gid()
        )));
    }
    Ok(())
}

/// Makes `path` as an empty file every user may read and write, unless it exists;
/// refuses anything but a regular file there.
fn make_shared_file(path: &Path) -> Result<(), Failure> {
    let refuse = |why: String| {
        Failure::new(
            exit::FAILED,
            format!("--system: refusing {}: {why}", path.display()),
        )
    };
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    match created {
        // The umask took bits away: every user must be able to lock.
        Ok(file) => file
            .set_permissions(std::fs::Permissions::from_mode(0o666))
            .map_err(|e| refuse(format!("cannot open it up: {e}"))),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(path)
                .map_err(|e| refuse(format!("cannot look at it: {e}")))?;
            if !meta.file_type().is_file() {
                return Err(refuse("it is not a regular file".into()));
            }
            Ok(())
        }
        Err(error) => Err(refuse(format!("cannot make it: {error}"))),
    }
}
