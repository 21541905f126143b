//! A closed stdout (its reader went away: `sluice obj get ID | head`,
//! `sluice model mva ... --json | head`) ends the command quietly with
//! exit status 0, as the coreutils do, instead of reporting `Broken pipe`
//! as a failure: the reader has what it wanted.

use std::io;

/// Whether `e` is the error of writing to a pipe whose reader is gone.
pub(crate) fn is_closed_pipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// Whether any error in `e`'s chain is a closed pipe (serde_json's
/// errors hide the `io::Error` they carry: asked by kind). Only for
/// commands whose one pipe is stdout: a closed socket is a failure.
pub(crate) fn chain_has_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>().is_some_and(is_closed_pipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(io::ErrorKind::BrokenPipe))
    })
}

/// Ends the process with status 0 when `e` is a closed pipe; a command
/// whose output nobody reads has nothing left to do.
pub(crate) fn exit_if_closed(e: &io::Error) {
    if is_closed_pipe(e) {
        std::process::exit(0);
    }
}

/// `print!` and `println!` panic on a closed stdout ("failed printing to
/// stdout: Broken pipe"); that panic ends the process quietly with
/// status 0 instead. Any other panic is reported as before.
pub(crate) fn quiet_on_closed_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        report(info);
    }));
}
