//! The controlling terminal, when lockctl runs as a job of an interactive shell (or a
//! script on a terminal): the command's process group gets the terminal, so it can
//! read it and Ctrl-C or Ctrl-\ reach it directly, and lockctl takes it back after.
//!
//! Without a controlling terminal (cron, systemd, most CI) nothing here touches one.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// lockctl's controlling terminal, open for the calls that move it between groups.
#[derive(Debug)]
pub(crate) struct Terminal {
    fd: OwnedFd,
}

impl Terminal {
    /// The controlling terminal, if lockctl has one and may hand it to the command
    /// whenever lockctl's process group is in its foreground.
    ///
    /// Not when lockctl's stdout or stderr is a pipe or a socket: lockctl is then
    /// feeding another process of its job (`lockctl run ... | less`), which may read
    /// the terminal itself and would be stopped if the command took it.
    pub(crate) fn controlling() -> Option<Terminal> {
        let feeds_another = [libc::STDOUT_FILENO, libc::STDERR_FILENO]
            .into_iter()
            .any(is_pipe_or_socket);
        if feeds_another {
            return None;
        }
        // SAFETY: a constant path; O_NOCTTY never makes it our controlling terminal
        // (it already is one, or the open fails with ENXIO).
        let fd = unsafe {
            libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: just opened, owned here alone.
        Some(Terminal {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The descriptor, for the supervisor to inherit.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The terminal's foreground process group (-1 if it has none).
    pub(crate) fn foreground(&self) -> libc::pid_t {
        // SAFETY: tcgetpgrp on a descriptor this owns.
        unsafe { libc::tcgetpgrp(self.fd.as_raw_fd()) }
    }

    /// Whether lockctl's own process group is in the foreground.
    pub(crate) fn ours(&self) -> bool {
        // SAFETY: getpgrp has no preconditions.
        self.foreground() == unsafe { libc::getpgrp() }
    }

    /// Makes `group` the foreground process group. lockctl ignores SIGTTOU while it
    /// has a terminal, so this works from the background too.
    pub(crate) fn give_to(&self, group: libc::pid_t) {
        // SAFETY: tcsetpgrp on a descriptor this owns; a failure changes nothing.
        unsafe {
            libc::tcsetpgrp(self.fd.as_raw_fd(), group);
        }
    }

    /// Takes the terminal back for lockctl's group if `group` has it.
    pub(crate) fn take_back_from(&self, group: libc::pid_t) {
        if self.foreground() == group {
            // SAFETY: getpgrp has no preconditions.
            self.give_to(unsafe { libc::getpgrp() });
        }
    }
}

fn is_pipe_or_socket(fd: RawFd) -> bool {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat fills in `stat` when it returns 0.
    if unsafe { libc::fstat(fd, stat.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: filled in above.
    let mode = unsafe { stat.assume_init() }.st_mode & libc::S_IFMT;
    mode == libc::S_IFIFO || mode == libc::S_IFSOCK
}
