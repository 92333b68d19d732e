//! Asking an operator before a destructive change: one prompt for every command that needs one.

use std::io::{BufRead, IsTerminal, Write};

/// Ask `question` on the terminal and go on only on `yes`. Without a terminal to ask on (or when
/// `may_ask` is false, e.g. for `--json`), refuse with `without_terminal`; every refusal says that
/// nothing was changed.
pub fn confirm_or_refuse(
    command: &str,
    question: &str,
    without_terminal: &str,
    may_ask: bool,
) -> anyhow::Result<()> {
    if !may_ask || !std::io::stdin().is_terminal() {
        anyhow::bail!("{without_terminal} (nothing was changed)");
    }
    eprint!("{question} Type 'yes' to go on: ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if answer.trim() != "yes" {
        anyhow::bail!("{command} not confirmed: nothing was changed");
    }
    Ok(())
}
