//! Usage errors as one short line with exit status 2, clap's included:
//! `sluice: error: WHAT; see 'sluice COMMAND --help'`. Help and version
//! output stay as clap prints them.

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

/// The command line, or exit: help and version as clap prints them, any
/// other error as one line with status 2.
pub(crate) fn parse<T: Parser>() -> T {
    match T::try_parse() {
        Ok(parsed) => parsed,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            let command = subcommand::<T>(std::env::args().skip(1));
            eprintln!("sluice: error: {}", with_help_hint(&one_line(&e), &command));
            std::process::exit(2)
        }
    }
}

/// `message; see 'sluice COMMAND --help'`, one line.
pub(crate) fn with_help_hint(message: &str, command: &str) -> String {
    let message = message.replace(['\n', '\r'], " ");
    if command.is_empty() {
        format!("{message}; see 'sluice --help'")
    } else {
        format!("{message}; see 'sluice {command} --help'")
    }
}

/// clap's error without its usage block and pointer at --help: its first
/// line, and its tip ("a similar argument exists: '--listen'") if any.
fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("bad usage");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_owned();
    for tip in lines.filter(|l| l.starts_with("tip: ")) {
        line.push_str("; ");
        line.push_str(tip);
    }
    line
}

/// The subcommand `args` name (the first that is one), or "".
fn subcommand<T: CommandFactory>(args: impl Iterator<Item = String>) -> String {
    let cli = T::command();
    args.take_while(|a| a != "--")
        .find(|a| cli.get_subcommands().any(|c| c.get_name() == a))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Subcommand;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(Debug, Subcommand)]
    enum Sub {
        Serve {
            #[arg(long)]
            listen: Option<String>,
        },
    }

    #[test]
    fn clap_errors_become_one_line_with_their_tip() {
        let e = Top::try_parse_from(["sluice", "serve", "--listne", "x"]).unwrap_err();
        let line = one_line(&e);
        assert!(
            line.starts_with("unexpected argument '--listne' found"),
            "{line}"
        );
        assert!(
            line.contains("tip: a similar argument exists: '--listen'"),
            "{line}"
        );
        assert!(!line.contains('\n') && !line.contains("Usage"), "{line}");
        let args = ["--log-format", "json", "serve", "--listne"].map(String::from);
        assert_eq!(subcommand::<Top>(args.into_iter()), "serve");
        assert_eq!(
            with_help_hint("bad", "serve"),
            "bad; see 'sluice serve --help'"
        );
    }
}
