//! `lockctl`: hold a distributed lock around a command, from any shell, on any backend.
//!
//! ```text
//! lockctl run nightly -- ./job.sh
//! lockctl --url redis://10.0.0.5 run --wait 10s nightly -- ./job.sh
//! ```
//!
//! See `lockctl --help` and the README's lockctl section for commands, environment
//! variables and exit codes.

mod admin;
mod cli;
mod events;
mod exit;
mod group;
mod locks;
mod run;
mod signals;
mod state_dir;
mod supervisor;
mod terminal;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use distributed_locks::{connect, ConnectOptions};

use cli::{Cli, Command, Store};
use events::Reporter;
use exit::Failure;
use locks::RunLock;
use signals::Inherited;

/// How long lockctl waits at exit for the backend to confirm its clean-ups (a
/// release retried in the background, say) before it leaves them to the lease.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    // Before anything installs a handler: the command gets these dispositions back.
    let inherited = Inherited::capture();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if supervisor::wanted(&args) {
        supervisor::main(&args[1..]);
    }
    let (cli, store) = match Cli::parse_with_store() {
        Ok(parsed) => parsed,
        Err(error) => return usage_error(&error),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            return fail(&Failure::new(
                exit::FAILED,
                format!("cannot start: {error}"),
            ))
        }
    };
    // The command's supervisor is forked inside `execute`, on this thread, which lives
    // as long as lockctl (see `group::CommandGroup::start`).
    match runtime.block_on(execute(cli, store, inherited)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => fail(&failure),
    }
}

async fn execute(cli: Cli, store: Store, inherited: Inherited) -> Result<u8, Failure> {
    // Caught before connecting, so Ctrl-C during a slow connect or a wait ends cleanly.
    let mut signals =
        match &cli.command {
            Command::Run(_) | Command::Elect(_) => {
                // An ignored SIGCHLD (inherited) would reap the supervisor unasked.
                // SAFETY: the default disposition of SIGCHLD is valid.
                unsafe {
                    libc::signal(libc::SIGCHLD, libc::SIG_DFL);
                }
                Some(signals::Signals::catch(inherited).map_err(|e| {
                    Failure::new(exit::FAILED, format!("cannot catch signals: {e}"))
                })?)
            }
            _ => None,
        };
    let url = match store {
        Store::Url(url) => url,
        Store::System => state_dir::system_url()?,
        Store::Own => state_dir::default_url()?,
    };
    let mut options = ConnectOptions::default().namespace(cli.namespace.clone());
    match &cli.command {
        Command::Run(args) => options = options.watchdog_lease(args.job.watchdog_lease),
        Command::Elect(args) => options = options.watchdog_lease(args.job.watchdog_lease),
        _ => {}
    }
    let client = match signals.as_mut() {
        Some(signals) => tokio::select! {
            client = connect(&url, options) => client?,
            signal = signals.next() => return Ok(exit::for_signal(signal)),
        },
        None => connect(&url, options).await?,
    };
    if !client.capabilities().cross_process {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "{url:?} keeps its locks inside one process: it cannot exclude other processes; use sqlite://PATH on one machine, or a server"
            ),
        ));
    }
    let name = match &cli.command {
        Command::Run(args) => &args.job.name,
        Command::Elect(args) => &args.job.name,
        Command::Leader { name }
        | Command::Status { name, .. }
        | Command::Wait { name, .. }
        | Command::ForceUnlock { name, .. } => name,
    };
    let reporter = Reporter::new(cli.json, name, &cli.namespace, client.backend_name());
    let outcome = match cli.command {
        Command::Run(args) => {
            let signals = signals.expect("caught above for run");
            run::run(client.clone(), args, reporter, signals, inherited).await
        }
        Command::Elect(args) => {
            let signals = signals.expect("caught above for elect");
            run::elect(client.clone(), args, reporter, signals, inherited).await
        }
        Command::Leader { name } => admin::leader(client.election(&name), &reporter).await,
        Command::Status { name, which } => {
            let lock = RunLock::named(&*client, &name, &which);
            admin::status(lock, &reporter).await
        }
        Command::Wait {
            name,
            wait,
            conflict_exit_code,
            which,
        } => {
            let lock = RunLock::named(&*client, &name, &which);
            admin::wait(lock, &name, wait, conflict_exit_code, &reporter).await
        }
        Command::ForceUnlock {
            name,
            yes,
            token,
            which,
        } => {
            let lock = RunLock::named(&*client, &name, &which);
            admin::force_unlock(&*client, lock, &name, yes, token, &reporter).await
        }
    };
    // Releases whatever is still held and finishes clean-ups before the process ends;
    // a backend that went away gets a few seconds, not the rest of the lease.
    match tokio::time::timeout(SHUTDOWN_LIMIT, client.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => eprintln!("lockctl: {error}"),
        Err(_) => eprintln!(
            "lockctl: the backend did not confirm the clean-up within {SHUTDOWN_LIMIT:?}; whatever lockctl still held expires with its lease"
        ),
    }
    outcome
}

/// One line on stderr and the usage exit code; help and version go to stdout as usual.
fn usage_error(error: &clap::Error) -> ExitCode {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            return ExitCode::from(exit::USAGE);
        }
        _ => {}
    }
    // clap's first paragraph (the error, and what is missing), on one line.
    let rendered = error.render().to_string();
    let line = rendered
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let line = line.trim_start_matches("error: ");
    eprintln!("lockctl: {line} (see lockctl --help)");
    ExitCode::from(exit::USAGE)
}

fn fail(failure: &Failure) -> ExitCode {
    eprintln!("lockctl: {failure}");
    ExitCode::from(failure.code)
}
