//! Who holds a lock, as its keys on the server tell it.
//!
//! A lease's stored value is `<owner token>:<request id>:<fence>`, and the request id
//! carries the client's description of itself: `<16 hex digits>.<description>`, with
//! `%`, `:`, `{` and `}` of the description percent-encoded so that the value still
//! splits at its colons and a receipt key named after the request keeps its hash tag.
//! The description thus costs no key and no write of its own, and goes away with the
//! lease. Other clients' values (redis-py's bare token) are listed as an owner alone.

use std::time::{Duration, SystemTime};

use lock_core::{HolderInfo, LockInfo, LockKind, Result};

use crate::error::Error;

/// The smallest fencing token read as a time (2001-09-09 in microseconds).
const CLOCK_FENCES_FROM: u64 = 1_000_000_000_000_000;

/// A new request id: 64 random bits in hex, then `.` and `description` when it is not
/// empty.
pub(crate) fn request_id(description: &str) -> String {
    // Sized once: one is made for every acquire call.
    let mut id = String::with_capacity(16 + 1 + description.len() + 8);
    lock_core::backend::push_hex(&mut id, &rand::random::<u64>().to_be_bytes());
    if description.is_empty() {
        return id;
    }
    id.push('.');
    for c in description.chars() {
        match c {
            '%' | ':' | '{' | '}' => {
                const UPPER: &[u8; 16] = b"0123456789ABCDEF";
                let code = c as usize;
                id.extend([
                    '%',
                    char::from(UPPER[code >> 4]),
                    char::from(UPPER[code & 0xf]),
                ]);
            }
            c => id.push(c),
        }
    }
    id
}

/// The description a request id carries, if any.
fn description_of(request: &str) -> Option<String> {
    let (_, encoded) = request.split_once('.')?;
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// One holder from its stored `value`, of `kind`, whose lease ends at `expiry_ms`
/// (server clock, ms since the epoch; negative: no expiry).
fn holder(kind: LockKind, value: &str, expiry_ms: i64) -> HolderInfo {
    let ours = value.rsplit_once(':').and_then(|(rest, fence)| {
        let fence = fence.parse::<u64>().ok()?;
        let (owner, request) = rest.rsplit_once(':')?;
        Some((owner, request, fence))
    });
    let Some((owner, request, fence)) = ours else {
        return expiring(HolderInfo::new(kind).with_owner(value), expiry_ms);
    };
    let mut info = HolderInfo::new(kind)
        .with_owner(owner)
        .with_fencing_token(fence);
    // A token is the server clock in microseconds at the grant (`next_fence.lua`), or
    // just above it when grants came faster than one a microsecond; a smaller one is a
    // counter from before that floor.
    if fence >= CLOCK_FENCES_FROM {
        info = info.with_acquired_at(SystemTime::UNIX_EPOCH + Duration::from_micros(fence));
    }
    if let Some(description) = description_of(request) {
        info = info.with_description(description);
    }
    expiring(info, expiry_ms)
}

/// `info` with its lease's end, if the key has one.
fn expiring(mut info: HolderInfo, expiry_ms: i64) -> HolderInfo {
    if let Ok(ms) = u64::try_from(expiry_ms) {
        info = info.with_expires_at(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
    }
    info
}

/// Decodes the reply of `holders.lua` (bytes: another client's value need not be
/// UTF-8).
pub(crate) fn lock_info(reply: &[Vec<u8>]) -> Result<LockInfo> {
    let reply: Vec<String> = reply
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    let unexpected =
        || lock_core::Error::from(Error::UnexpectedReply(format!("inspect: {reply:?}")));
    let [waiters, rest @ ..] = &reply[..] else {
        return Err(unexpected());
    };
    if rest.len() % 3 != 0 {
        return Err(unexpected());
    }
    let waiters = match waiters.parse::<i64>().map_err(|_| unexpected())? {
        n if n < 0 => None,
        n => Some(n as usize),
    };
    let mut holders: Vec<HolderInfo> = Vec::with_capacity(rest.len() / 3);
    for entry in rest.chunks(3) {
        let kind = match entry[0].as_str() {
            // The value the leader before it proclaimed.
            "v" => {
                let leader = holders
                    .last_mut()
                    .filter(|holder| holder.kind == LockKind::Leader)
                    .ok_or_else(unexpected)?;
                leader.description = Some(entry[1].clone());
                continue;
            }
            "e" => LockKind::Exclusive,
            "f" => LockKind::Fair,
            "l" => LockKind::Leader,
            "w" => LockKind::Write,
            "r" => LockKind::Read,
            "p" => LockKind::Permit,
            _ => return Err(unexpected()),
        };
        let expiry = entry[2].parse::<i64>().map_err(|_| unexpected())?;
        holders.push(holder(kind, &entry[1], expiry));
    }
    Ok(LockInfo::new(holders, waiters))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_carries_the_description_and_keeps_the_value_splittable() {
        let id = request_id("host-1:80 {x} 100%");
        assert_eq!(
            id.len(),
            16 + 1 + "host-1%3A80 %7Bx%7D 100%25".len(),
            "{id}"
        );
        assert!(!id.contains([':', '{', '}']), "{id}");
        assert!(
            id[..16]
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{id}"
        );
        assert_eq!(&id[16..], ".host-1%3A80 %7Bx%7D 100%25");
        assert_eq!(description_of(&id).as_deref(), Some("host-1:80 {x} 100%"));
        assert_ne!(
            request_id("")[..16],
            request_id("")[..16],
            "64 random bits each"
        );
        let plain = request_id("");
        assert_eq!(plain.len(), 16);
        assert_eq!(description_of(&plain), None);
        assert_ne!(request_id("a"), request_id("a"));
    }

    #[test]
    fn holders_are_read_from_stored_values() {
        let request = request_id("web-3 pid 77");
        let reply: Vec<Vec<u8>> = [
            "2",
            "r",
            &format!("c1:4:{request}:1700000000000041"),
            "1700000001500",
            "e",
            "redis-py-token",
            "-1",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let info = lock_info(&reply).unwrap();
        assert_eq!(info.waiters, Some(2));
        let reader = &info.holders[0];
        assert_eq!(reader.kind, LockKind::Read);
        assert_eq!(reader.owner.as_deref(), Some("c1:4"));
        assert_eq!(reader.fencing_token, Some(1_700_000_000_000_041));
        assert_eq!(
            reader.acquired_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_000_041))
        );
        assert_eq!(reader.description.as_deref(), Some("web-3 pid 77"));
        assert_eq!(
            reader.expires_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_001_500))
        );
        let foreign = &info.holders[1];
        assert_eq!(foreign.owner.as_deref(), Some("redis-py-token"));
        assert_eq!(foreign.fencing_token, None);
        assert_eq!(foreign.expires_at, None);
        assert!(lock_info(&[]).is_err());
        let proclaimed: Vec<Vec<u8>> = [
            "0",
            "l",
            &format!("c1:4:{request}:9"),
            "-1",
            "v",
            "new: {x}",
            "-1",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let leader = &lock_info(&proclaimed).unwrap().holders[0];
        assert_eq!(leader.kind, LockKind::Leader);
        assert_eq!(leader.description.as_deref(), Some("new: {x}"));
        assert!(lock_info(&[b"0".to_vec(), b"v".to_vec(), b"x".to_vec(), b"-1".to_vec()]).is_err());
        let after_fair: Vec<Vec<u8>> = ["0", "f", "c1:4:r:9", "-1", "v", "x", "-1"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        assert!(
            lock_info(&after_fair).is_err(),
            "a value after a fair holder"
        );
        assert!(lock_info(&[b"-1".to_vec(), b"x".to_vec()]).is_err());
    }
}
