//! Where lockctl keeps its locks when no URL is given: an SQLite file in the user's
//! state directory.

use std::path::PathBuf;

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
