//! The CLI's stdout and stderr writers behind its `print!`, `println!` and `eprintln!`
//! (see the `cli` module docs for why they are not std's).

use std::fmt;
use std::io::{self, Write};

/// The exit status when stdout's reader went away: 128 + SIGPIPE, what a shell shows for a
/// process the signal ended (`yes | head -1`), so `set -o pipefail` scripts see the usual.
pub const CLOSED_PIPE_STATUS: i32 = 128 + libc::SIGPIPE;

/// What a failed write to stdout means for the command.
#[derive(Debug, PartialEq, Eq)]
pub enum WriteFailure {
    /// The reader is gone (EPIPE): stop quietly.
    ReaderGone,
    /// Anything else (no space, I/O error): say so.
    Failed(String),
}

/// Writes `args` to `out` and flushes, classifying a failure.
pub fn write_to(out: &mut impl Write, args: fmt::Arguments<'_>) -> Result<(), WriteFailure> {
    match out.write_fmt(args).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(WriteFailure::ReaderGone),
        Err(e) => Err(WriteFailure::Failed(e.to_string())),
    }
}

/// Writes to stdout; when that fails the process ends here (quietly for a closed pipe).
pub fn stdout(args: fmt::Arguments<'_>) {
    match write_to(&mut io::stdout().lock(), args) {
        Ok(()) => {}
        // Exiting without unwinding is what SIGPIPE's default would do at this write; the
        // commands that print hold nothing whose cleanup matters at that point.
        Err(WriteFailure::ReaderGone) => std::process::exit(CLOSED_PIPE_STATUS),
        Err(WriteFailure::Failed(why)) => {
            stderr(format_args!("tether: cannot write to standard output: {why}\n"));
            std::process::exit(1)
        }
    }
}

/// Writes to stderr, ignoring failure.
pub fn stderr(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose reader is gone, or that fails otherwise.
    struct Broken(io::ErrorKind);

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(self.0))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_told_apart_from_other_failures() {
        let mut ok = Vec::new();
        assert_eq!(write_to(&mut ok, format_args!("{} {}\n", 1, "x")), Ok(()));
        assert_eq!(ok, b"1 x\n");
        assert_eq!(write_to(&mut Broken(io::ErrorKind::BrokenPipe), format_args!("x")), Err(WriteFailure::ReaderGone));
        assert!(matches!(
            write_to(&mut Broken(io::ErrorKind::StorageFull), format_args!("x")),
            Err(WriteFailure::Failed(_))
        ));
        assert_eq!(CLOSED_PIPE_STATUS, 141);
    }
}
