//! Output: the CLI's lines on stdout, written so that a reader that went away (`outbox stats |
//! head`) ends the command quietly instead of panicking with "failed printing to stdout".
//!
//! Owns the [`out!`] macro every command prints its results with. It never writes logs or
//! errors (those go to stderr through `tracing` and `errln!`, see [`crate::log_output`]).

use std::io::{self, Write};

/// Print one line to stdout, like `println!`; when the reader closed the pipe, exit quietly
/// (status 0, as `head` and `grep -q` expect of what feeds them); on any other write error,
/// say so on stderr and exit 1.
macro_rules! out {
    () => {
        $crate::output::write_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::write_line(format_args!($($arg)*))
    };
}

/// Write `line` and a newline to stdout (see [`out!`]).
pub fn write_line(line: std::fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    let written = stdout
        .write_fmt(line)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    if let Err(e) = written {
        if e.kind() == io::ErrorKind::BrokenPipe {
            crate::log_output::flush_at_exit(crate::log_output::FLUSH_AT_EXIT);
            std::process::exit(0);
        }
        crate::log_output::write_line(format_args!("error: cannot write to stdout: {e}"));
        crate::log_output::flush_at_exit(crate::log_output::FLUSH_AT_EXIT);
        std::process::exit(1);
    }
}
