//! The create options of every node this backend makes: open, or creator-only when the
//! client authenticates with a digest.

use zookeeper_client::{Acls, CreateMode, CreateOptions};

fn acls(secured: bool) -> Acls<'static> {
    if secured {
        // "auth" ACL: whatever identities this session authenticated with (its digest).
        Acls::creator_all()
    } else {
        Acls::anyone_all()
    }
}

/// A lock path or namespace node (`container`: reaped by the server once empty), or
/// the chroot (persistent).
pub(crate) fn directory_options(secured: bool, container: bool) -> CreateOptions<'static> {
    let mode = if container {
        CreateMode::Container
    } else {
        CreateMode::Persistent
    };
    mode.with_acls(acls(secured))
}

/// A contender node: ephemeral (the session is the lease) and sequential (the queue).
pub(crate) fn contender_options(secured: bool) -> CreateOptions<'static> {
    CreateMode::EphemeralSequential.with_acls(acls(secured))
}
