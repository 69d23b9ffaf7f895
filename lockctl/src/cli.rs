//! The command line: commands, options and how durations are written.

use std::ffi::OsString;
use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use distributed_locks::DEFAULT_NAMESPACE;

use crate::exit;

/// Hold a distributed lock around a command, on any backend.
///
/// Without --url (or LOCKCTL_URL), locks live in an SQLite file in your state directory
/// ($XDG_STATE_HOME/lockctl/locks.db, else ~/.local/state/lockctl/locks.db): enough for
/// your own processes on one machine, with no server. --system uses one file for every
/// user of the machine instead.
#[derive(Debug, Parser)]
#[command(name = "lockctl", version, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    /// The backend: redis://, redlock://, zk://, etcd://, postgres://, mysql://,
    /// sqlite://path (default: the SQLite file in your state directory).
    #[arg(short, long, global = true, env = "LOCKCTL_URL", value_name = "URL")]
    pub(crate) url: Option<String>,
    /// Use the machine-wide SQLite file that every user of this machine shares
    /// ($LOCKCTL_SYSTEM_DIR/locks.db, default /run/lock/lockctl/locks.db) instead of your own.
    /// LOCKCTL_SYSTEM=1 (or yes, true, on) does the same.
    #[arg(
        long,
        global = true,
        env = "LOCKCTL_SYSTEM",
        value_parser = FalseyValueParser::new()
    )]
    pub(crate) system: bool,
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

/// lockctl's exit codes, at the end of `--help`.
const EXIT_CODES: &str = "\
Exit codes:
  the command's  the command ran and exited (128 + N if signal N killed it)
  64             usage: bad option, duration or URL, no command
  69             the backend could not be reached in time
  70             another error of the backend; the command's supervisor was killed
  75 (or -E N)   not acquired: held with --no-wait, or still held when --wait ran out
  79             the lock was lost, or its lease was running out: the command was
                 stopped (or not started), or ended with the lock no longer held
  126, 127       the command could not be run, or was not found
  128 + N        lockctl got signal N while it waited for the lock";

/// Where the locks are, as the command line and the environment say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Store {
    /// `--url` or `LOCKCTL_URL`.
    Url(String),
    /// `--system` or `LOCKCTL_SYSTEM`.
    System,
    /// The SQLite file in the user's state directory.
    Own,
}

impl Cli {
    /// Parses the command line; also says which store it names. The command line
    /// wins over the environment (`--system` over `LOCKCTL_URL`, `--url` over
    /// `LOCKCTL_SYSTEM`); `--url` and `--system` both on the command line are refused.
    pub(crate) fn parse_with_store() -> Result<(Cli, Store), clap::Error> {
        let matches = Cli::command().try_get_matches()?;
        let cli = Cli::from_arg_matches(&matches)?;
        let store = cli.store(&matches)?;
        Ok((cli, store))
    }

    fn store(&self, matches: &ArgMatches) -> Result<Store, clap::Error> {
        let typed = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        let (url_typed, system_typed) = (typed("url"), self.system && typed("system"));
        if url_typed && system_typed {
            return Err(Cli::command().error(
                ErrorKind::ArgumentConflict,
                "--url and --system cannot be used together",
            ));
        }
        Ok(match (&self.url, self.system) {
            (Some(url), _) if url_typed => Store::Url(url.clone()),
            (_, true) if system_typed => Store::System,
            (Some(url), _) => Store::Url(url.clone()),
            (None, true) => Store::System,
            (None, false) => Store::Own,
        })
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Acquire NAME, run the command while holding it, release it when the command
    /// and every process it started have ended, and exit with the command's exit code.
    Run(RunArgs),
    /// Campaign in the election NAME and run the command while leading (its term in
    /// LOCK_FENCING_TOKEN); the command is stopped if leadership is lost, and the
    /// leadership resigned when it ends. Exit with the command's exit code.
    Elect(ElectArgs),
    /// Print the leader of the election NAME: its value and term; exit 0 when someone
    /// leads, 1 when nobody does.
    Leader {
        /// The election's name.
        name: String,
    },
    /// Say whether NAME is held, and by whom where the backend keeps it (host and pid,
    /// since when, fencing token, lease end); exit 0 when free, 1 when held. With
    /// -N N, the semaphore NAME: how many of its permits are held; exit 1 when all are.
    /// With --election, the election NAME: its leader and how many candidates wait.
    Status {
        /// The lock's name.
        name: String,
        #[command(flatten)]
        which: WhichLock,
    },
    /// Block until NAME is free, without taking it (with -N N, until a permit of the
    /// semaphore NAME is free; with --election, until nobody leads the election NAME).
    Wait {
        /// Give up after this long (exit 75, or --conflict-exit-code), e.g. 30s.
        #[arg(short, long, value_parser = parse_duration, value_name = "DURATION")]
        wait: Option<Duration>,
        /// The exit code when --wait runs out while NAME is still held.
        #[arg(short = 'E', long, value_name = "CODE", default_value_t = exit::NOT_ACQUIRED)]
        conflict_exit_code: u8,
        /// The lock's name.
        name: String,
        #[command(flatten)]
        which: WhichLock,
    },
    /// Take NAME away from whoever holds it (their `lockctl run` stops its command);
    /// with -N N, every permit of the semaphore NAME (or the one --token names); with
    /// --election, the leadership of the election NAME (its `lockctl elect` stops its
    /// command, and the next candidate leads).
    ForceUnlock {
        /// The lock's name.
        name: String,
        #[command(flatten)]
        which: WhichLock,
        /// Do not ask for confirmation (needed when stdin is not a terminal).
        #[arg(short, long)]
        yes: bool,
        /// Break only the holder with this fencing token (`status` prints it): a holder
        /// that has replaced it meanwhile is left alone. Not for an election, whose
        /// leader is removed whole.
        #[arg(short, long, value_name = "N", conflicts_with = "election")]
        token: Option<u64>,
    },
}

/// `-N N` or `--election` of `status`, `wait` and `force-unlock`: the semaphore NAME
/// that `run -N N` takes permits of, or the election NAME that `elect` campaigns in,
/// rather than the lock NAME.
#[derive(Debug, Args)]
pub(crate) struct WhichLock {
    /// The semaphore NAME of N permits (as `run -N N` takes it), not the lock NAME.
    #[arg(
        short = 'N',
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        conflicts_with = "election"
    )]
    pub(crate) permits: Option<u32>,
    /// The election NAME (as `elect` campaigns in), not the lock NAME: its leader is
    /// what holds it.
    #[arg(long)]
    pub(crate) election: bool,
}

/// `lockctl run`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Take the lock shared: shared runs of NAME run side by side; a run without
    /// --shared waits for all of them, and they wait for it (a read-write lock).
    #[arg(short, long, conflicts_with = "exclusive")]
    pub(crate) shared: bool,
    /// Take the lock exclusively (the default; for flock users).
    #[arg(short = 'x', long)]
    pub(crate) exclusive: bool,
    /// Wait in line: --fair runs get the lock in the order they asked for it. A run
    /// without --fair may still get in ahead of them.
    #[arg(long)]
    pub(crate) fair: bool,
    /// At most N runs of NAME at once (consul lock's `-n`; `-n` here is --no-wait, as in
    /// flock): each takes a permit of the semaphore NAME of N permits, granted in
    /// request order. Every run of NAME must give the same N.
    #[arg(
        short = 'N',
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        conflicts_with_all = ["shared", "exclusive", "fair"]
    )]
    pub(crate) permits: Option<u32>,
    #[command(flatten)]
    pub(crate) job: JobArgs,
}

/// `lockctl elect`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The value published as the leader's while this run leads (`lockctl leader`
    /// prints it); default: this host and lockctl's pid.
    #[arg(long, value_name = "VALUE")]
    pub(crate) value: Option<String>,
    /// After the command exits (or leadership is lost), campaign again (at most once a
    /// second), until lockctl gets a signal or the command dies of SIGINT or SIGQUIT
    /// (Ctrl-C or Ctrl-\ at a terminal). A campaign that fails with a retryable error
    /// (the backend down) is tried again after 1 s, doubling up to 30 s.
    #[arg(long)]
    pub(crate) again: bool,
    #[command(flatten)]
    pub(crate) job: JobArgs,
}

/// What `run` and `elect` share: how long to wait, how the lease is kept, the
/// command, and the name.
#[derive(Debug, Args)]
pub(crate) struct JobArgs {
    /// Give up after waiting this long (exit 75, or --conflict-exit-code); default:
    /// wait without limit.
    #[arg(short, long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,
    /// Try once: exit 75 (or --conflict-exit-code) at once if the lock is held.
    #[arg(short, long)]
    pub(crate) no_wait: bool,
    /// The exit code when the lock is not acquired (held with --no-wait, or still
    /// held when --wait ran out), so that it cannot be mistaken for the command's own.
    #[arg(short = 'E', long, value_name = "CODE", default_value_t = exit::NOT_ACQUIRED)]
    pub(crate) conflict_exit_code: u8,
    /// A fixed lease: the lock is lost if the command runs longer than this. Default:
    /// the watchdog keeps the lease for as long as the command runs.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) lease: Option<Duration>,
    /// The lease the watchdog keeps renewing (every third of it): how long the lock
    /// stays held after lockctl dies without releasing it, and within about a third of
    /// which a force-unlock is noticed.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "30s")]
    pub(crate) watchdog_lease: Duration,
    /// How long the command has between SIGTERM and SIGKILL when its lease is running
    /// out (renewals failing, or a fixed --lease ending): at most a third of the lease.
    /// SIGTERM comes that long before SIGKILL, and SIGKILL a tenth of the lease (at most
    /// 1 s) before the lease's end, so the command is gone before the lock is. A lock
    /// taken away without warning (force-unlock, lost by the server) gets SIGKILL at
    /// once: another run may hold it already.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "10s")]
    pub(crate) kill_grace: Duration,
    /// Run this command string with /bin/sh -c, instead of a command after `--`.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STRING",
        conflicts_with = "argv"
    )]
    pub(crate) shell_command: Option<OsString>,
    /// The lock's (or election's) name.
    pub(crate) name: String,
    /// The command and its arguments (after `--`).
    #[arg(
        required_unless_present = "shell_command",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub(crate) argv: Vec<OsString>,
}

impl JobArgs {
    /// The program and its arguments to run.
    pub(crate) fn command_line(&self) -> Vec<OsString> {
        match &self.shell_command {
            Some(string) => vec!["/bin/sh".into(), "-c".into(), string.clone()],
            None => self.argv.clone(),
        }
    }
}

/// Parses `500ms`, `10s`, `1.5s`, `2m` or `1h` (a bare number is seconds).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    distributed_locks::parse_duration(text).map_err(|err| match err {
        distributed_locks::Error::InvalidArgument { message } => message,
        other => other.to_string(),
    })
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
