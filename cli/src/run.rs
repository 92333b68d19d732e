//! Run: picks the [`crate::ops`] function of the command line's command, with the routes file
//! loaded the way that command needs it.
//!
//! Owns the dispatch only: one arm per command, each a call of one `ops::` function. It never
//! prints, connects or decides anything about a command itself (that is the command's function).

use crate::config_source::{load_config, load_config_or_environment};
use crate::ops;
use crate::opt::{
    Command, ContractsCommand, OperatorCommand, Opt, PluginsCommand, QueueCommand, RoutesCommand,
};
use outbox_host::store::RepairAction;

/// Run the command `opt` names. An [`ExitStatus`](crate::exit_status::ExitStatus) error asks
/// for that exit status, having printed what there was to say; any other error is printed by
/// `main` and exits 1.
pub(crate) async fn run(opt: Opt) -> anyhow::Result<()> {
    let path = &opt.config;
    match opt.command {
        Command::Migrate => ops::migrate(&load_config_or_environment(path)?).await,
        Command::Run(args) => ops::run_host(load_config(path)?, args).await,
        Command::Drain => ops::drain(load_config(path)?).await,
        Command::Publish(args) => ops::publish(&load_config_or_environment(path)?, args).await,
        Command::Demo => ops::run_demo(load_config(path)?).await,
        Command::Stats { json } => ops::stats(&load_config_or_environment(path)?, json).await,
        Command::Contracts { command } => {
            let config = load_config_or_environment(path)?;
            let dir =
                |dir: Option<std::path::PathBuf>| dir.unwrap_or_else(|| config.contracts_dir());
            match command {
                ContractsCommand::List { dir: d, json } => ops::list_contracts(&dir(d), json),
                ContractsCommand::Show {
                    event_type,
                    dir: d,
                    json,
                } => ops::show_contract(&dir(d), &event_type, json),
                ContractsCommand::Check { dir: d } => ops::check_contracts(&dir(d), &config),
                ContractsCommand::Diff { old, new, json } => {
                    ops::diff_contract_files(&old, &new, json)
                }
            }
        }
        Command::Routes { command } => match command {
            RoutesCommand::Check { file } => ops::check_routes(file.or_else(|| path.clone())),
            RoutesCommand::Which { event_type, json } => {
                ops::which_route(path, &event_type, json).await
            }
        },
        Command::DeadLetter { command } => {
            let config = load_config_or_environment(path)?;
            let (action, selection, dry_run, json) = command.into_request();
            ops::dead_letters(&config, &selection, action, dry_run, json).await
        }
        Command::Requeue { filter, options } => {
            let config = load_config_or_environment(path)?;
            let action = RepairAction::Requeue;
            ops::repair_rows(&config, action, filter.into(), options.into()).await
        }
        Command::Cancel { filter, options } => {
            let config = load_config_or_environment(path)?;
            let action = RepairAction::Cancel;
            ops::repair_rows(&config, action, filter.into(), options.into()).await
        }
        Command::Operator { command } => {
            let config = load_config_or_environment(path)?;
            match command {
                OperatorCommand::Add { name, role } => {
                    ops::add_operator(&config, &name, &role).await
                }
                OperatorCommand::List { json } => ops::list_operators(&config, json).await,
                OperatorCommand::Revoke { name } => ops::revoke_operator(&config, &name).await,
            }
        }
        Command::Trace { id, depth, json } => {
            ops::print_trace(&load_config(path)?, id, depth, json).await
        }
        Command::Release { worker, force } => {
            ops::release_worker(&load_config_or_environment(path)?, &worker, force).await
        }
        Command::Queue { command } => {
            let config = load_config_or_environment(path)?;
            match command {
                QueueCommand::Pause { queue, reason } => {
                    ops::pause_queue(&config, &queue, reason.as_deref()).await
                }
                QueueCommand::Resume { queue } => ops::resume_queue(&config, &queue).await,
                QueueCommand::List { json } => ops::list_queues(&config, json).await,
            }
        }
        Command::Audit { limit, json } => {
            ops::print_audit(&load_config_or_environment(path)?, limit, json).await
        }
        Command::Config => ops::print_config(&load_config_or_environment(path)?),
        Command::Plugins { command } => match command {
            PluginsCommand::List { json } => {
                ops::list_plugins(&load_config_or_environment(path)?, json).await
            }
            PluginsCommand::Check { file } => ops::check_plugin(file, path).await,
            PluginsCommand::Call(args) => ops::call_plugin(path, args).await,
            PluginsCommand::New {
                name,
                world,
                lang,
                dir,
                sdk,
            } => ops::new_plugin(&name, world.into(), lang.into(), dir, sdk),
            PluginsCommand::Sdk { out, force } => ops::write_plugin_sdk(&out, force),
            PluginsCommand::Wit { out, force } => ops::write_plugin_wit(&out, force),
        },
    }
}
