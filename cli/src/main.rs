//! The `outbox` command: [`opt`] parses the command line, [`run`] calls the command's function
//! in [`ops`], which goes through the library and prints what operators see. The library itself
//! never prints.

use clap::Parser;

#[macro_use]
mod output;
#[macro_use]
mod log_output;
mod config_source;
mod exit_status;
mod ops;
mod opt;
mod run;
mod signals;
mod span_export;

/// mimalloc instead of the system allocator: the host allocates and frees per event on every
/// worker thread (queue entries, plugin calls, Redis replies), and glibc's malloc spent a fifth
/// of the host's CPU on it end to end (`_int_free`, `malloc_consolidate`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let span_export = span_export::init(log_output::LogOutput::install_stderr());
    let opt = opt::Opt::parse();
    let ran = run::run(opt).await;
    if let Some(span_export) = span_export {
        span_export.shutdown().await;
    }
    let code = match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<exit_status::ExitStatus>() {
            Some(exit_status::ExitStatus(code)) => std::process::ExitCode::from(*code),
            None => {
                errln!("error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        },
    };
    log_output::flush_at_exit(log_output::FLUSH_AT_EXIT);
    code
}
