//! A client's durations written as the servers' time limits: PostgreSQL counts whole
//! milliseconds up to `i32::MAX`, MariaDB whole seconds up to a year. Both round up, so
//! a server never ends anything before the client's duration.

use std::time::Duration;

/// MariaDB's largest `wait_timeout` and `idle_*transaction_timeout`.
pub(crate) const LONGEST_MYSQL_LIMIT: Duration = Duration::from_secs(31_536_000);

/// A PostgreSQL limit in whole milliseconds, at least one; `"0"` (none) past its
/// largest value.
pub(crate) fn limit_ms(limit: Duration) -> String {
    let ms = limit.as_nanos().div_ceil(1_000_000).max(1);
    if ms > i32::MAX as u128 {
        "0".to_owned()
    } else {
        ms.to_string()
    }
}

/// `limit` in whole seconds, rounded up.
pub(crate) fn whole_secs(limit: Duration) -> u64 {
    limit
        .as_secs()
        .saturating_add(u64::from(limit.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_up_and_saturate() {
        assert_eq!(limit_ms(Duration::from_micros(1500)), "2");
        assert_eq!(limit_ms(Duration::ZERO), "1");
        assert_eq!(limit_ms(Duration::from_secs(10_000_000)), "0");
        assert_eq!(whole_secs(Duration::from_millis(2001)), 3);
        assert_eq!(whole_secs(Duration::ZERO), 0);
        assert_eq!(whole_secs(Duration::MAX), u64::MAX);
    }
}
