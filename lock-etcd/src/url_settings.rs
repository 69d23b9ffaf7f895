//! The settings an etcd URL's query may carry, read into the config before any
//! setter runs (so a setter overrides the URL). An unknown key is an error.

use lock_core::backend::QuerySettings;
use lock_core::Result;

use crate::config::EtcdConfig;

/// `config` with the settings of `query`.
pub(crate) fn apply(mut config: EtcdConfig, query: &str) -> Result<EtcdConfig> {
    let pairs = url::form_urlencoded::parse(query.as_bytes())
        .map(|(key, value)| (key.into_owned(), value.into_owned()));
    let mut query = QuerySettings::new(pairs)?;
    if let Some(timeout) = query.duration("connect_timeout")? {
        config = config.with_connect_timeout(timeout);
    }
    if let Some(timeout) = query.duration("request_timeout")? {
        config = config.with_request_timeout(timeout);
    }
    if let Some(tls) = query.tls() {
        config = config.with_tls(tls);
    }
    query.finish("etcd")?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lock_core::Error;

    use crate::EtcdConfig;

    #[test]
    fn every_setting_from_the_url() {
        let config =
            EtcdConfig::from_url("etcd://a:1,b:2?connect_timeout=700ms&request_timeout=3s")
                .unwrap();
        assert_eq!(config.connect_timeout(), Duration::from_millis(700));
        assert_eq!(config.request_timeout(), Duration::from_secs(3));
        assert_eq!(config.endpoints(), ["http://a:1", "http://b:2"]);
    }

    #[test]
    fn a_setter_overrides_the_url() {
        let config = EtcdConfig::from_url("etcd://a?request_timeout=5s")
            .unwrap()
            .with_request_timeout(Duration::from_millis(300));
        assert_eq!(config.request_timeout(), Duration::from_millis(300));
    }

    #[test]
    fn unknown_keys_bad_values_and_misplaced_tls_are_refused() {
        for (url, words) in [
            ("etcd://a?timeout=1s", "timeout"),
            ("etcd://a?request_timeout=soon", "request_timeout"),
            ("etcd://a?tls_ca=/ca.pem", "etcd+https://"),
            ("etcd+https://a?tls_cert=/c.pem", "key"),
        ] {
            let result = EtcdConfig::from_url(url);
            if url.starts_with("etcd+https") && !cfg!(feature = "tls") {
                assert!(result.is_err(), "{url}");
                continue;
            }
            let err = result.unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{url}: {err}");
            assert!(err.to_string().contains(words), "{url}: {err}");
        }
    }
}
