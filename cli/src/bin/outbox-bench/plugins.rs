//! Plugins section: the prefix-router plugin against the native table (cost per event in
//! batches, fresh instantiation, dispatcher throughput with each). Both routers are built with
//! [`build_router`] from a routes file, as `outbox run` builds them.

use std::time::Instant;

use anyhow::Context as _;
use outbox_host::config::{Config, PluginSpec, Settings};
use outbox_host::live_config::LiveConfig;
use outbox_host::routing::{build_router, Router, RouterHandle};
use outbox_host::store::ClaimedEvent;
use sqlx::PgPool;

use crate::common::{host_throughput, prepare};
use crate::report::Report;
use crate::Args;

/// The router plugin measured.
const ROUTER_PLUGIN: &str = "prefix-router";

/// Routing cost and throughput of the router plugin against the native table.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    config: &Config,
    pool: &PgPool,
    settings: &Settings,
) -> anyhow::Result<()> {
    // The same routes, once through the router plugin and once through the native table.
    let mut plugin_config = config.clone();
    plugin_config.settings = settings.clone();
    plugin_config.routes.router.plugin = ROUTER_PLUGIN.into();
    if !plugin_config.routes.plugins.contains_key(ROUTER_PLUGIN) {
        let spec: PluginSpec = toml::from_str("").context("an empty plugin spec")?;
        plugin_config
            .routes
            .plugins
            .insert(ROUTER_PLUGIN.into(), spec);
    }
    // Called for every batch, as before `router_by_type` (the shipped routes.toml declares it;
    // the remembered path is timed on its own below).
    if let Some(spec) = plugin_config.routes.plugins.get_mut(ROUTER_PLUGIN) {
        spec.router_by_type = false;
    }
    let live = LiveConfig::start(&plugin_config)
        .await
        .context("load the router plugin")?;
    let mut by_type_config = plugin_config.clone();
    if let Some(spec) = by_type_config.routes.plugins.get_mut(ROUTER_PLUGIN) {
        spec.router_by_type = true;
    }
    let by_type_live = LiveConfig::start(&by_type_config)
        .await
        .context("load the router plugin declared router_by_type")?;
    let router = live.router.current();
    anyhow::ensure!(
        router.name() == ROUTER_PLUGIN,
        "{ROUTER_PLUGIN} plugin not loaded from {}: run scripts/build-plugins.sh",
        plugin_config.settings.plugin_dir.display()
    );
    let mut native_routes = plugin_config.routes.clone();
    native_routes.router.plugin = "native".into();
    native_routes.router.overrides.clear();
    let native = RouterHandle::from_box(build_router(&live.registry, &native_routes));

    let sample: Vec<ClaimedEvent> = (0..1000)
        .map(|i| ClaimedEvent {
            tenant_id: Some("t".into()),
            ..ClaimedEvent::unclaimed(
                i,
                [
                    "mail.welcome",
                    "tenant.subscription.created",
                    "audit.login",
                    "webhook.sent",
                    "search.index.doc",
                ][usize::try_from(i).unwrap_or(0) % 5],
                r#"{"user": 42, "text": "hello, welcome aboard"}"#,
            )
        })
        .collect();
    let loaded = live
        .registry
        .get(ROUTER_PLUGIN)
        .with_context(|| format!("{ROUTER_PLUGIN} not loaded"))?;
    // Plugin calls block their thread until they end: time them on a blocking thread, as the
    // dispatcher runs them.
    let (native_router, plugin_router) = (native.current(), router.clone());
    let by_type_router = by_type_live.router.current();
    let (native_ns, plugin_ns, by_type_ns, inst) = tokio::task::spawn_blocking(move || {
        let per_event = |r: &dyn Router| -> anyhow::Result<f64> {
            let rounds = 50;
            let start = Instant::now();
            for _ in 0..rounds {
                std::hint::black_box(r.route_batch(&sample)?);
            }
            Ok(start.elapsed().as_nanos() as f64 / (rounds * sample.len()) as f64)
        };
        let native_ns = per_event(native_router.as_ref().as_ref())?;
        let plugin_ns = per_event(plugin_router.as_ref().as_ref())?;
        // Each type asked once (the first batch), answered from memory after that.
        let by_type_ns = per_event(by_type_router.as_ref().as_ref())?;
        let inst = loaded.time_instantiation(2000)?;
        anyhow::Ok((native_ns, plugin_ns, by_type_ns, inst))
    })
    .await??;
    report.say(format_args!("routing cost (batches of 1000): native table {native_ns:.0} ns/event, prefix-router plugin {plugin_ns:.0} ns/event, the same declared router_by_type {by_type_ns:.0} ns/event"));
    let inst_us = inst.as_secs_f64() * 1e6;
    report.say(format_args!(
        "fresh instantiation (InstancePre + pooling, new store each time): {inst_us:.1} us"
    ));
    report
        .figure(
            "plugins",
            "plugins.routing_cost",
            "routing cost, prefix-router plugin (batches of 1000)",
            plugin_ns,
            "ns/event",
        )
        .against("plugins.routing_cost_native", "native table", native_ns);
    report
        .figure(
            "plugins",
            "plugins.routing_cost_by_type",
            "routing cost, prefix-router plugin declared router_by_type (batches of 1000, five types)",
            by_type_ns,
            "ns/event",
        )
        .against("plugins.routing_cost_native", "native table", native_ns);
    report.figure(
        "plugins",
        "plugins.fresh_instance",
        "fresh plugin instance (InstancePre + pooling, new store)",
        inst_us,
        "us",
    );
    let mut best_native = 0f64;
    let mut best_plugin = 0f64;
    for round in 1..=args.rounds {
        prepare(pool, settings, args.events).await?;
        let native = host_throughput(pool, settings, native.clone(), args.events).await?;
        prepare(pool, settings, args.events).await?;
        let plugin = host_throughput(pool, settings, live.router.clone(), args.events).await?;
        report.say(format_args!("  round {round}: native router {native:>9.0} events/s | plugin router {plugin:>9.0} events/s"));
        best_native = best_native.max(native);
        best_plugin = best_plugin.max(plugin);
    }
    report.say(format_args!("throughput with the plugin router: {best_plugin:.0} events/s vs native {best_native:.0} events/s, ratio plugin/native = {:.2}", best_plugin / best_native));
    report
        .figure(
            "plugins",
            "plugins.dispatch_plugin_router",
            "dispatch throughput with the prefix-router plugin",
            best_plugin,
            "events/s",
        )
        .against(
            "plugins.dispatch_native_router",
            "same with the native table",
            best_native,
        );
    Ok(())
}
