//! Validated lock names, namespaces and the keys backends store them under.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The longest lock name or namespace accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 512;

/// The namespace used when none is configured.
pub const DEFAULT_NAMESPACE: &str = "locks";

fn validate(what: &str, value: &str) -> Result<()> {
    if value.is_empty() {
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
        validate("lock name", name)?;
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

/// The characters a [`Namespace`] may not contain: the separators backends put between
/// the namespace and the name (`:` on Redis, `/` on ZooKeeper and etcd) and Redis's
/// hash-tag braces.
pub const NAMESPACE_SEPARATORS: [char; 4] = [':', '/', '{', '}'];

/// The prefix every lock of a client lives under, so tenants and test runs never
/// collide.
///
/// Non-empty, at most [`MAX_NAME_BYTES`] bytes, no control characters and none of
/// [`NAMESPACE_SEPARATORS`]. Because a namespace cannot contain the separator that
/// follows it in a backend's key, and cannot be empty, every backend's key starts
/// with exactly one namespace: two different (namespace, name) pairs never share a
/// key, whatever the name contains.
///
/// ```
/// use lock_core::Namespace;
/// assert_eq!(Namespace::default().as_str(), "locks");
/// assert!(Namespace::new("tenant-7").is_ok());
/// assert!(Namespace::new("bad\nprefix").is_err());
/// assert!(Namespace::new("").is_err());
/// assert!(Namespace::new("tenant/7").is_err());
/// assert!(Namespace::new("app:jobs").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(Arc<str>);

impl Namespace {
    /// Validates `prefix`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] saying what is wrong with it.
    pub fn new(prefix: &str) -> Result<Self> {
        validate("namespace", prefix)?;
        if let Some(c) = prefix.chars().find(|c| NAMESPACE_SEPARATORS.contains(c)) {
            return Err(Error::invalid_argument(format!(
                "namespace {prefix:?} contains {c:?}; a namespace may not contain any of \
                 ':', '/', '{{' or '}}' (they separate it from the name in backend keys)"
            )));
        }
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

    /// `namespace`, `separator`, `name`. With a separator from
    /// [`NAMESPACE_SEPARATORS`] this is injective: the namespace cannot contain it, so
    /// the first separator in the result ends the namespace.
    pub fn joined(&self, separator: char) -> String {
        // Built by hand: backends call this on every acquire and release, and
        // `format!` would grow the string more than once.
        let (namespace, name) = (self.namespace.as_str(), self.name.as_str());
        let mut joined = String::with_capacity(namespace.len() + separator.len_utf8() + name.len());
        joined.push_str(namespace);
        joined.push(separator);
        joined.push_str(name);
        joined
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

    #[test]
    fn namespaces_cannot_alias_across_a_separator() {
        for bad in ["", "ns:x", "ns/x", "{ns", "ns}", "a\tb"] {
            let err = Namespace::new(bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument { .. }),
                "{bad:?}: {err}"
            );
        }
        let err = Namespace::new("ns:x").unwrap_err().to_string();
        assert!(err.contains("':'"), "{err}");
        // ("ns", "x:y") and ("ns:x", "y") were one key on Redis; now the second is refused.
        let key = LockKey::new(Namespace::new("ns").unwrap(), LockName::new("x:y").unwrap());
        assert_eq!(key.joined(':'), "ns:x:y");
        assert!(Namespace::new("tenant-7.eu_west").is_ok());
    }
}
