//! Redis Cluster: hash slots, the slot map, and the cluster client.
//!
//! The redis crate's cluster connection routes each script call by its first key's
//! slot and follows `MOVED`/`ASK` after a resharding or a failover. What it does not
//! do is batch renewals of many locks in one call per node; [`nodes_of`] groups keys
//! by the node that serves their slot, from one `CLUSTER SLOTS` per renewal tick.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::Value;

use crate::config::RedisConfig;
use crate::error;

/// How many hash slots a cluster has.
const SLOTS: u16 = 16384;

/// CRC16/XMODEM, the checksum Redis Cluster hashes keys with.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The hash slot of `key`: of its `{tag}` if it has a non-empty one, else of the key.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let len = rest.iter().position(|&b| b == b'}')?;
            (len > 0).then(|| &rest[..len])
        })
        .unwrap_or(bytes);
    crc16(hashed) % SLOTS
}

/// A cluster client for `config`'s seed nodes. No I/O.
pub(crate) fn client(
    config: &RedisConfig,
    push: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
) -> lock_core::Result<ClusterClient> {
    let nodes = config.cluster_nodes().unwrap_or_default().to_vec();
    let settings = config.redis_settings();
    let mut builder = ClusterClientBuilder::new(nodes)
        .connection_timeout(config.connect_timeout())
        // Calls are bounded by the node's own limits (see `Node::run`).
        .response_timeout(config.call_timeout() + Duration::from_secs(1))
        // Redirections after a failover are followed a few times, quickly.
        .retries(5)
        .min_retry_wait(10)
        .max_retry_wait(200);
    if let Some(username) = settings.username() {
        builder = builder.username(username);
    }
    if let Some(password) = settings.password() {
        builder = builder.password(password);
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = config.tls() {
        builder = builder.certs(crate::config::certificates(tls)?);
    }
    if let Some(push) = push {
        builder = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(push);
    }
    builder.build().map_err(|err| {
        lock_core::Error::invalid_argument(format!("invalid Redis Cluster settings: {err}"))
    })
}

/// A connection to the whole cluster, within `limit`.
pub(crate) async fn connect(
    client: &ClusterClient,
    limit: Duration,
) -> lock_core::Result<ClusterConnection> {
    error::within(
        "connecting to the Redis Cluster",
        limit,
        client.get_async_connection(),
    )
    .await
}

/// A node's `(host, port)`.
type NodeAddr = (String, u16);

/// The primary serving each slot range: first slot to (last slot, primary).
pub(crate) type SlotOwners = BTreeMap<u16, (u16, NodeAddr)>;

/// The primary serving each slot range, from a `CLUSTER SLOTS` reply.
pub(crate) fn slot_owners(reply: &Value) -> Option<SlotOwners> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut owners = BTreeMap::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return None;
        };
        let host = match primary.first()? {
            Value::BulkString(host) => String::from_utf8_lossy(host).into_owned(),
            Value::SimpleString(host) => host.clone(),
            _ => return None,
        };
        let Some(Value::Int(port)) = primary.get(1) else {
            return None;
        };
        owners.insert(
            u16::try_from(*start).ok()?,
            (
                u16::try_from(*end).ok()?,
                (host, u16::try_from(*port).ok()?),
            ),
        );
    }
    Some(owners)
}

/// Groups `keys` (by index) by the primary that serves their slot; keys whose slot no
/// range covers come last, each alone.
pub(crate) fn nodes_of(owners: &SlotOwners, keys: &[&str]) -> Vec<Vec<usize>> {
    let mut by_node: BTreeMap<&NodeAddr, Vec<usize>> = BTreeMap::new();
    let mut unowned = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let slot = slot(key);
        match owners.range(..=slot).next_back() {
            Some((_, (end, node))) if slot <= *end => by_node.entry(node).or_default().push(i),
            _ => unowned.push(vec![i]),
        }
    }
    by_node.into_values().chain(unowned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // The values `CLUSTER KEYSLOT` gives.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
        assert_eq!(slot("app:jobs"), slot("{app:jobs}:fence"));
    }

    #[test]
    fn keys_are_grouped_by_the_node_serving_their_slot() {
        let node = |port: i64| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Int(0), Value::Int(8191), node(7000)]),
            Value::Array(vec![Value::Int(8192), Value::Int(16383), node(7001)]),
        ]);
        let owners = slot_owners(&reply).unwrap();
        // "foo" is in slot 12182, "a" in 15495, "b" in 3300.
        let groups = nodes_of(&owners, &["foo", "b", "a"]);
        assert_eq!(groups, vec![vec![1], vec![0, 2]]);
        assert!(slot_owners(&Value::Nil).is_none());
    }
}
