//! Every backend is configured the same way: `from_url`, setters that never fail, and
//! one check of every value at connect, before any connection is tried, with an
//! error naming the setting.
#![cfg(all(
    feature = "redis",
    feature = "zookeeper",
    feature = "etcd",
    feature = "sql"
))]

use std::time::{Duration, Instant};

use distributed_locks::etcd::{EtcdBackend, EtcdConfig};
use distributed_locks::redis::{RedisBackend, RedisConfig};
use distributed_locks::sql::{SqlBackend, SqlConfig};
use distributed_locks::zookeeper::{ZkBackend, ZkConfig};
use distributed_locks::{Error, Result};

/// An address nothing answers on: a connect attempt there would take its whole timeout.
const NOWHERE: &str = "10.255.255.1";

/// A bad value is refused at once, as an invalid argument naming `setting`.
fn refused<T: std::fmt::Debug>(backend: &str, setting: &str, started: Instant, result: Result<T>) {
    let err = result.expect_err(backend);
    assert!(
        matches!(err, Error::InvalidArgument { .. }),
        "{backend}: {err:?}"
    );
    assert!(err.to_string().contains(setting), "{backend}: {err}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{backend}: tried to connect first ({:?})",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_bad_value_is_refused_by_connect_before_any_connection_on_every_backend() {
    let slow = Duration::from_secs(30);

    let redis = RedisConfig::from_url(&format!("redis://{NOWHERE}:6379"))
        .unwrap()
        .with_connect_timeout(slow)
        .with_request_timeout(Duration::ZERO);
    let started = Instant::now();
    refused(
        "redis",
        "request timeout",
        started,
        RedisBackend::connect(redis).await,
    );

    let zk = ZkConfig::from_url(&format!("zk://{NOWHERE}:2181"))
        .unwrap()
        .with_connect_timeout(slow)
        .with_request_timeout(Duration::ZERO);
    let started = Instant::now();
    refused(
        "zookeeper",
        "request timeout",
        started,
        ZkBackend::connect(zk).await,
    );

    let etcd = EtcdConfig::from_url(&format!("etcd://{NOWHERE}:2379"))
        .unwrap()
        .with_connect_timeout(slow)
        .with_request_timeout(Duration::ZERO);
    let started = Instant::now();
    refused(
        "etcd",
        "request timeout",
        started,
        EtcdBackend::connect(etcd).await,
    );

    let postgres = SqlConfig::from_url(&format!("postgres://{NOWHERE}:5432/app"))
        .unwrap()
        .with_connect_timeout(slow)
        .with_request_timeout(Duration::ZERO);
    let started = Instant::now();
    refused(
        "postgres",
        "request_timeout",
        started,
        SqlBackend::connect(postgres).await,
    );
}

#[tokio::test]
async fn credentials_and_timeouts_have_one_name_on_every_backend() {
    let timeout = Duration::from_millis(700);
    let redis = RedisConfig::from_url("redis://h")
        .unwrap()
        .with_credentials("locks", "pw")
        .with_connect_timeout(timeout)
        .with_request_timeout(timeout);
    let zk = ZkConfig::from_url("zk://h")
        .unwrap()
        .with_credentials("locks", "pw")
        .with_connect_timeout(timeout)
        .with_request_timeout(timeout);
    let etcd = EtcdConfig::from_url("etcd://h")
        .unwrap()
        .with_credentials("locks", "pw")
        .with_connect_timeout(timeout)
        .with_request_timeout(timeout);
    let sql = SqlConfig::from_url("postgres://h/app")
        .unwrap()
        .with_credentials("locks", "pw")
        .with_connect_timeout(timeout)
        .with_request_timeout(timeout);
    let seen = [
        (
            redis.username(),
            redis.connect_timeout(),
            redis.request_timeout(),
            format!("{redis:?}"),
        ),
        (
            zk.username(),
            zk.connect_timeout(),
            zk.request_timeout(),
            format!("{zk:?}"),
        ),
        (
            etcd.username(),
            etcd.connect_timeout(),
            etcd.request_timeout(),
            format!("{etcd:?}"),
        ),
        (
            sql.username(),
            sql.connect_timeout(),
            sql.request_timeout(),
            format!("{sql:?}"),
        ),
    ];
    for (user, connect, request, shown) in seen {
        assert_eq!(user, Some("locks"), "{shown}");
        assert_eq!((connect, request), (timeout, timeout), "{shown}");
        assert!(!shown.contains("\"pw\""), "a password shown: {shown}");
    }
}

#[test]
fn an_unknown_url_setting_is_refused_by_from_url_on_every_backend() {
    for err in [
        RedisConfig::from_url("redis://h?pool=3").map(drop),
        ZkConfig::from_url("zk://h?pool=3").map(drop),
        EtcdConfig::from_url("etcd://h?pool=3").map(drop),
        SqlConfig::from_url("postgres://h/app?pool=3").map(drop),
    ]
    .into_iter()
    .map(Result::unwrap_err)
    {
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        assert!(err.to_string().contains("pool"), "{err}");
    }
}
