//! The command line: commands, options and how durations are written.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use distributed_locks::{DEFAULT_NAMESPACE, MAX_DURATION};

/// Hold a distributed lock around a command, on any backend.
///
/// Without --url (or LOCKCTL_URL), locks live in an SQLite file in your state directory
/// ($XDG_STATE_HOME/lockctl/locks.db, else ~/.local/state/lockctl/locks.db): enough for
/// processes on one machine, with no server.
#[derive(Debug, Parser)]
#[command(name = "lockctl", version)]
pub(crate) struct Cli {
    /// The backend: redis://, redlock://, zk://, etcd://, postgres://, mysql://,
    /// sqlite://path (default: the SQLite file in your state directory).
    #[arg(long, global = true, env = "LOCKCTL_URL", value_name = "URL")]
    pub(crate) url: Option<String>,
    /// The namespace the lock's name lives in.
    #[arg(long, global = true, default_value = DEFAULT_NAMESPACE, value_name = "NS")]
    pub(crate) namespace: String,
    /// Report events (acquired, lost, released, ...) as JSON lines on stderr.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Acquire NAME, run the command while holding it, release it when the command
    /// exits, and exit with the command's exit code.
    Run(RunArgs),
    /// Say whether NAME is held (exit 0 when free, 1 when held).
    Status {
        /// The lock's name.
        name: String,
    },
    /// Block until NAME is free, without taking it.
    Wait {
        /// The lock's name.
        name: String,
        /// Give up after this long (exit 75), e.g. 30s.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        wait: Option<Duration>,
    },
    /// Take NAME away from whoever holds it (their `lockctl run` stops its command).
    ForceUnlock {
        /// The lock's name.
        name: String,
        /// Do not ask for confirmation (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

/// `lockctl run`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Give up after waiting this long (exit 75); default: wait without limit.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,
    /// Try once: exit 75 at once if the lock is held.
    #[arg(long)]
    pub(crate) no_wait: bool,
    /// A fixed lease: the lock is lost if the command runs longer than this. Default:
    /// the watchdog keeps the lease for as long as the command runs.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) lease: Option<Duration>,
    /// The lease the watchdog keeps renewing: how long the lock stays held after
    /// lockctl dies without releasing it (SIGKILL, power loss).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "30s")]
    pub(crate) watchdog_lease: Duration,
    /// After the lock is lost: how long the command has between SIGTERM and SIGKILL.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "10s")]
    pub(crate) kill_grace: Duration,
    /// The lock's name.
    pub(crate) name: String,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub(crate) command: Vec<OsString>,
}

/// Parses `500ms`, `10s`, `1.5s`, `2m` or `1h` (a bare number is seconds).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!("invalid duration {text:?}: expected a number and a unit, e.g. 500ms, 10s, 2m, 1h")
    };
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(bad()),
    };
    let duration = Duration::try_from_secs_f64(seconds).map_err(|_| bad())?;
    if duration > MAX_DURATION {
        return Err(format!(
            "duration {text:?} is too long (at most {} days)",
            MAX_DURATION.as_secs() / 86_400
        ));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_with_units_and_clear_errors() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        for bad in [
            "",
            "s",
            "ten",
            "10 parsecs",
            "-1s",
            "1e999s",
            "1.2.3s",
            "NaNs",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("duration"), "{bad}: {err}");
        }
        assert!(parse_duration("99999999h")
            .unwrap_err()
            .contains("too long"));
    }
}
