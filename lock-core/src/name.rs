//! Validated lock names, namespaces and the keys backends store them under.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The longest lock name or namespace accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 512;

/// The namespace used when none is configured.
pub const DEFAULT_NAMESPACE: &str = "locks";

fn validate(what: &str, value: &str, allow_empty: bool) -> Result<()> {
    if value.is_empty() && !allow_empty {
        return Err(Error::invalid_argument(format!("{what} must not be empty")));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(Error::invalid_argument(format!(
            "{what} is {} bytes long; at most {MAX_NAME_BYTES} are allowed",
            value.len()
        )));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(Error::invalid_argument(format!(
            "{what} {value:?} contains the control character {c:?}"
        )));
    }
    Ok(())
}

/// A lock's name: non-empty, at most [`MAX_NAME_BYTES`] bytes of UTF-8, no control
/// characters. Anything else (slashes, quotes, spaces, any script) is allowed; each
/// backend encodes it safely.
///
/// ```
/// use lock_core::LockName;
/// assert!(LockName::new("orders/42").is_ok());
/// assert!(LockName::new("").is_err());
/// assert!(LockName::new("tab\there").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(Arc<str>);

impl LockName {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] saying what is wrong with it.
    pub fn new(name: &str) -> Result<Self> {
        validate("lock name", name, false)?;
        Ok(LockName(name.into()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The prefix every lock of a client lives under, so tenants and test runs never
/// collide. Same rules as [`LockName`]; it may be empty (no prefix).
///
/// ```
/// use lock_core::Namespace;
/// assert_eq!(Namespace::default().as_str(), "locks");
/// assert!(Namespace::new("tenant-7").is_ok());
/// assert!(Namespace::new("bad\nprefix").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(Arc<str>);

impl Namespace {
    /// Validates `prefix`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] saying what is wrong with it.
    pub fn new(prefix: &str) -> Result<Self> {
        validate("namespace", prefix, true)?;
        Ok(Namespace(prefix.into()))
    }

    /// The prefix as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Namespace(DEFAULT_NAMESPACE.into())
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Where a lock lives: its namespace and name. Backends render it into their own key
/// or path format (for example `namespace:name` on Redis).
///
/// ```
/// use lock_core::{LockKey, LockName, Namespace};
/// let key = LockKey::new(Namespace::new("app")?, LockName::new("jobs")?);
/// assert_eq!(key.joined(':'), "app:jobs");
/// assert_eq!(LockKey::new(Namespace::new("")?, LockName::new("jobs")?).joined(':'), "jobs");
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    namespace: Namespace,
    name: LockName,
}

impl LockKey {
    /// The key of `name` inside `namespace`.
    pub fn new(namespace: Namespace, name: LockName) -> Self {
        LockKey { namespace, name }
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// `namespace`, `separator`, `name`; just the name when the namespace is empty.
    pub fn joined(&self, separator: char) -> String {
        if self.namespace.as_str().is_empty() {
            self.name.as_str().to_owned()
        } else {
            format!(
                "{}{separator}{}",
                self.namespace.as_str(),
                self.name.as_str()
            )
        }
    }
}

impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}/{:?}", self.namespace, self.name)
    }
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.joined('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated_with_clear_messages() {
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        let err = LockName::new(&long).unwrap_err().to_string();
        assert!(err.contains("at most 512"), "{err}");
        let err = LockName::new("a\0b").unwrap_err().to_string();
        assert!(err.contains("control character"), "{err}");
        assert!(LockName::new("x".repeat(MAX_NAME_BYTES).as_str()).is_ok());
        assert!(LockName::new("'; DROP TABLE locks; -- ünïcödé 锁").is_ok());
    }
}
