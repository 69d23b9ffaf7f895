//! The settings a Redis URL's query may carry, read into the config before any
//! setter runs (so a setter overrides the URL). An unknown key is an error.

use lock_core::backend::QuerySettings;
use lock_core::{Error, Result};

use crate::config::{RedisConfig, TooFewReplicas};

/// Splits `url` into the URL without its query and the query, keeping the one
/// fragment the client knows (`#insecure`) on the URL. Any other `#` stays where it
/// is (a value such as a password keeps it).
pub(crate) fn split_query(url: &str) -> (String, Option<String>) {
    let (before, fragment) = match url.strip_suffix("#insecure") {
        Some(before) => (before, "#insecure"),
        None => (url, ""),
    };
    let Some((base, query)) = before.split_once('?') else {
        return (url.to_owned(), None);
    };
    (format!("{base}{fragment}"), Some(query.to_owned()))
}

/// `config` with the settings of `query`.
pub(crate) fn apply(config: RedisConfig, query: &str) -> Result<RedisConfig> {
    let pairs = url::form_urlencoded::parse(query.as_bytes())
        .map(|(key, value)| (key.into_owned(), value.into_owned()));
    let mut query = QuerySettings::new(pairs)?;
    let mut next = config;
    if let Some(timeout) = query.duration("connect_timeout")? {
        next = next.with_connect_timeout(timeout);
    }
    // `command_timeout` is the older name, still read.
    let request_timeout =
        match (
            query.duration("request_timeout")?,
            query.duration("command_timeout")?,
        ) {
            (Some(_), Some(_)) => return Err(Error::invalid_argument(
                "URL settings `request_timeout` and `command_timeout` are one setting: give one",
            )),
            (request, command) => request.or(command),
        };
    if let Some(timeout) = request_timeout {
        next = next.with_request_timeout(timeout);
    }
    if let Some(lease) = query.duration("waiter_lease")? {
        next = next.with_waiter_lease(lease);
    }
    if let Some(poll) = query.duration("silent_holder_poll")? {
        next = next.with_silent_holder_poll(poll);
    }
    if let Some(grace) = query.duration("failover_grace")? {
        next = next.with_failover_grace(grace);
    }
    if let Some(user) = query.text("sentinel_username") {
        next = next.with_sentinel_username(user);
    }
    if let Some(password) = query.text("sentinel_password") {
        next = next.with_sentinel_password(password);
    }
    let replicas = query.number::<u32>("replica_acks")?;
    let timeout = query.duration("replica_acks_timeout")?;
    let on_too_few = query
        .text("replica_acks_on_too_few")
        .map(|value| match value.as_str() {
            "release" => Ok(TooFewReplicas::Release),
            "keep-and-warn" => Ok(TooFewReplicas::KeepAndWarn),
            other => Err(Error::invalid_argument(format!(
                "URL setting `replica_acks_on_too_few={other}`: use release or keep-and-warn"
            ))),
        })
        .transpose()?;
    match replicas {
        Some(replicas) => {
            next = next.with_replica_acks(
                replicas,
                timeout.unwrap_or(DEFAULT_REPLICA_ACKS_TIMEOUT),
                on_too_few.unwrap_or_default(),
            );
        }
        None if timeout.is_some() || on_too_few.is_some() => return Err(Error::invalid_argument(
            "URL settings `replica_acks_timeout` and `replica_acks_on_too_few` need `replica_acks`",
        )),
        None => {}
    }
    if let Some(tls) = query.tls() {
        next = next.with_tls(tls);
    }
    if query.text("protocol").is_some() {
        return Err(Error::invalid_argument(
            "URL setting `protocol`: lock-redis chooses the protocol of each connection itself (RESP2, RESP3 for a cluster's sharded pub/sub)",
        ));
    }
    query.finish("Redis")?;
    Ok(next)
}

/// How long a grant waits for its replicas when the URL names `replica_acks` alone.
const DEFAULT_REPLICA_ACKS_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::RedisConfig;

    #[test]
    fn queries_split_off_and_fragments_kept() {
        assert_eq!(
            split_query("rediss://h:1/2?command_timeout=1s#insecure"),
            (
                "rediss://h:1/2#insecure".to_owned(),
                Some("command_timeout=1s".to_owned())
            )
        );
        assert_eq!(split_query("redis://h"), ("redis://h".to_owned(), None));
        assert_eq!(
            split_query("redis+sentinel://h/locks?sentinel_password=a#b"),
            (
                "redis+sentinel://h/locks".to_owned(),
                Some("sentinel_password=a#b".to_owned())
            )
        );
    }

    #[test]
    fn every_setting_from_the_url() {
        let config = RedisConfig::from_url(
            "redis+sentinel://10.0.0.1/locks?connect_timeout=300ms&request_timeout=1s\
             &waiter_lease=9s&silent_holder_poll=40ms&failover_grace=20s\
             &sentinel_username=watch&sentinel_password=pw&replica_acks=1\
             &replica_acks_timeout=250ms&replica_acks_on_too_few=keep-and-warn",
        )
        .unwrap();
        assert_eq!(config.connect_timeout(), Duration::from_millis(300));
        assert_eq!(config.request_timeout(), Duration::from_secs(1));
        let older = RedisConfig::from_url("redis://h?command_timeout=3s").unwrap();
        assert_eq!(older.request_timeout(), Duration::from_secs(3));
        assert_eq!(config.waiter_lease(), Duration::from_secs(9));
        assert_eq!(config.silent_holder_poll(), Duration::from_millis(40));
        assert_eq!(config.failover_grace(), Duration::from_secs(20));
        let acks = config.replica_acks().unwrap();
        assert_eq!(acks.replicas, 1);
        assert_eq!(acks.timeout, Duration::from_millis(250));
        assert_eq!(acks.on_too_few, TooFewReplicas::KeepAndWarn);
    }

    #[test]
    fn a_setter_overrides_the_url() {
        let config = RedisConfig::from_url("redis://h?request_timeout=5s")
            .unwrap()
            .with_request_timeout(Duration::from_millis(700));
        assert_eq!(config.request_timeout(), Duration::from_millis(700));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        for (url, words) in [
            ("redis://h?comand_timeout=1s", "comand_timeout"),
            ("redis://h?command_timeout=fast", "command_timeout"),
            (
                "redis://h?request_timeout=1s&command_timeout=1s",
                "one setting",
            ),
            ("redis://h?replica_acks_timeout=1s", "need `replica_acks`"),
            (
                "redis://h?replica_acks=1&replica_acks_on_too_few=shrug",
                "shrug",
            ),
            ("redis+cluster://h:1?command_timeout=1s&x=1", "x"),
            ("redis://h?protocol=resp3", "chooses the protocol"),
            ("redis://:p?w@h:6379/0", "percent-encoded"),
        ] {
            let err = RedisConfig::from_url(url).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{url}: {err}");
            assert!(err.to_string().contains(words), "{url}: {err}");
        }
    }
}
