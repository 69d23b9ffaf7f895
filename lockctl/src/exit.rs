//! lockctl's own exit codes, and a failure that carries one.

use std::fmt;

use distributed_locks::Error;

/// Bad arguments: an unknown option, a bad duration or URL, no command.
pub(crate) const USAGE: u8 = 64;
/// The backend could not be reached (or stopped answering) in time.
pub(crate) const UNAVAILABLE: u8 = 69;
/// Any other error of the lock backend.
pub(crate) const FAILED: u8 = 70;
/// The lock was not acquired: held, with `--no-wait`, or still held when `--wait` ran out.
pub(crate) const NOT_ACQUIRED: u8 = 75;
/// The lock was lost, or its lease was running out: the command was stopped (or not
/// started), or it ended with the lock no longer held.
pub(crate) const LOST: u8 = 79;
/// The command was found but could not be run.
pub(crate) const CANNOT_RUN: u8 = 126;
/// The command was not found.
pub(crate) const NOT_FOUND: u8 = 127;

/// What ends lockctl early: one line for stderr and the exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
    /// The same may succeed if tried again (the backend's error said so).
    pub(crate) retryable: bool,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            retryable: false,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        let code = match &error {
            Error::InvalidArgument { .. } | Error::Unsupported { .. } => USAGE,
            Error::Unavailable { .. } => UNAVAILABLE,
            Error::Timeout { .. } => NOT_ACQUIRED,
            Error::LeaseLost { .. } => LOST,
            _ => FAILED,
        };
        // The message stays on one line whatever the backend put in it.
        let message = error.to_string().replace(['\n', '\r'], " ");
        Failure {
            code,
            message,
            retryable: error.is_retryable(),
        }
    }
}

/// The code a shell reports for a process killed by `signal`.
pub(crate) fn for_signal(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(FAILED)
}
