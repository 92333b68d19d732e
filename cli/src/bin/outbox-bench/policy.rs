//! Policy section: the cost of a capability check through the capability-policy plugin
//! ([`CapabilityPolicy::check`], uncached and cached, allowed and denied) against the same
//! decision in plain Rust. The native check exists only as the comparison point: the host
//! never decides capabilities this way.

use std::time::Instant;

use anyhow::Context as _;
use outbox_host::capability::CapabilityPolicy;
use outbox_host::config::Grants;
use outbox_host::live_config::LiveConfig;
use outbox_host::plugin::LoadedPlugin;

use crate::common::{BENCH_HANDLER, POLICY_PLUGIN};
use crate::report::Report;
use crate::Args;

/// The capability check the `capability-policy` plugin makes, in plain Rust: `log` always,
/// `publish` on a granted prefix, `kv` when granted, `http` on an exact granted host.
fn native_check(
    plugin: &str,
    grants: &Grants,
    capability: &str,
    target: &str,
) -> Result<(), String> {
    let allowed = match capability {
        "log" => true,
        "publish" => grants
            .publish
            .iter()
            .any(|p| target.starts_with(p.as_str())),
        "kv" => grants.kv,
        "http" => grants.http.iter().any(|h| h.eq_ignore_ascii_case(target)),
        _ => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "plugin '{plugin}' may not {capability} '{target}' (granted prefixes: {})",
            grants.publish.join(", ")
        ))
    }
}

/// Average nanoseconds of `check` over `n` calls, after a short warm-up.
fn ns_per_call(n: u32, mut check: impl FnMut() -> Result<(), String>) -> (f64, bool) {
    for _ in 0..(n / 20).max(10) {
        let _ = std::hint::black_box(check());
    }
    let mut all_ok = true;
    let start = Instant::now();
    for _ in 0..n {
        all_ok &= std::hint::black_box(check()).is_ok();
    }
    (start.elapsed().as_nanos() as f64 / f64::from(n), all_ok)
}

/// Policy checks through [`CapabilityPolicy::check`] (cache misses, cache hits, audited
/// denials) against the same decision in native Rust.
pub(crate) async fn run(args: &Args, report: &mut Report, live: &LiveConfig) -> anyhow::Result<()> {
    let registry = live.registry.clone();
    let plugin = registry
        .get(BENCH_HANDLER)
        .with_context(|| format!("{BENCH_HANDLER} not loaded"))?;
    let policy_plugin = registry
        .get(POLICY_PLUGIN)
        .with_context(|| format!("{POLICY_PLUGIN} not loaded"))?;
    let n = args.policy_checks;
    let denials = (n / 10).max(1);
    let inst =
        tokio::task::spawn_blocking(move || policy_plugin.time_instantiation(2000)).await??;
    let policy = CapabilityPolicy::with_plugin(registry, POLICY_PLUGIN);
    let figures = tokio::task::spawn_blocking(move || -> anyhow::Result<[f64; 8]> {
        let plugin: &LoadedPlugin = &plugin;
        let allowed = "workflow.execution.requested";
        let denied = "billing.charge";
        // Distinct targets miss the decision cache: every check runs the policy plugin.
        let mut i = 0u64;
        let (wasm_allow_uncached, ok) = ns_per_call(n, || {
            i += 1;
            policy.check(plugin, "publish", &format!("{allowed}.v{i}"))
        });
        anyhow::ensure!(ok, "policy plugin denied publish {allowed}.*");
        let (wasm_deny_uncached, _) = ns_per_call(denials, || {
            i += 1;
            policy.check(plugin, "publish", &format!("{denied}.v{i}"))
        });
        // The same request again: answered from the decision cache.
        let (wasm_allow, ok) = ns_per_call(n, || policy.check(plugin, "publish", allowed));
        anyhow::ensure!(ok, "policy plugin denied publish {allowed}");
        // Denials write an audit line: without a subscriber (the bench installs none) tracing
        // drops it; the second run formats it into a sink, as a log subscriber would.
        let (wasm_deny, ok) = ns_per_call(denials, || policy.check(plugin, "publish", denied));
        anyhow::ensure!(!ok, "policy plugin allowed publish {denied}");
        let sink = tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .with_max_level(tracing::Level::INFO)
            .finish();
        let (wasm_deny_logged, _) = tracing::subscriber::with_default(sink, || {
            ns_per_call(denials, || policy.check(plugin, "publish", denied))
        });
        let grants = &plugin.spec.grants;
        let (native_allow, ok) = ns_per_call(n.saturating_mul(50), || {
            native_check(
                &plugin.name,
                std::hint::black_box(grants),
                "publish",
                std::hint::black_box(allowed),
            )
        });
        anyhow::ensure!(ok, "native check denied publish {allowed}");
        let (native_deny, _) = ns_per_call(n, || {
            native_check(
                &plugin.name,
                std::hint::black_box(grants),
                "publish",
                std::hint::black_box(denied),
            )
        });
        // The same decision with the grants round trip the plugin pays (serialize, parse).
        let (native_json, _) = ns_per_call(n, || {
            let json =
                serde_json::to_string(std::hint::black_box(grants)).map_err(|e| e.to_string())?;
            let parsed: Grants = serde_json::from_str(&json).map_err(|e| e.to_string())?;
            native_check(
                &plugin.name,
                &parsed,
                "publish",
                std::hint::black_box(allowed),
            )
        });
        Ok([
            wasm_allow_uncached,
            wasm_deny_uncached,
            wasm_allow,
            wasm_deny,
            wasm_deny_logged,
            native_allow,
            native_deny,
            native_json,
        ])
    })
    .await??;
    let [wasm_allow_uncached, wasm_deny_uncached, wasm_allow, wasm_deny, wasm_deny_logged, native_allow, native_deny, native_json] =
        figures;
    report.say(format_args!(
        "policy check (CapabilityPolicy::check via capability-policy plugin, grants publish [\"workflow.\"], one thread):"
    ));
    report.say(format_args!(
        "  every check runs the policy plugin (distinct targets, cache misses): allowed {wasm_allow_uncached:.0} ns/check, denied {wasm_deny_uncached:.0} ns/check"
    ));
    report.say(format_args!(
        "  repeated request, answered from the decision cache: allowed {wasm_allow:.0} ns/check, denied {wasm_deny:.0} ns/check"
    ));
    report.say(format_args!(
        "  allowed publish workflow.execution.requested ({n} checks): cached {wasm_allow:.0} ns/check | native prefix match {native_allow:.1} ns/check | native with the grants JSON round trip {native_json:.0} ns/check"
    ));
    report.say(format_args!(
        "  denied publish billing.charge ({denials} checks): wasm {wasm_deny:.0} ns/check (audit line dropped, no subscriber), {wasm_deny_logged:.0} ns/check (audit line formatted to a sink) | native {native_deny:.0} ns/check"
    ));
    report.say(format_args!(
        "  policy plugin fresh instantiation alone: {:.1} us; added cost of the check in WebAssembly per host call: {:.0} ns uncached (allowed), {:.0} ns uncached (denied), {:.0} ns cached (allowed)",
        inst.as_secs_f64() * 1e6,
        wasm_allow_uncached - native_allow,
        wasm_deny_uncached - native_deny,
        wasm_allow - native_allow
    ));
    report
        .figure(
            "policy",
            "policy.check_uncached",
            "capability check in the policy plugin (cache miss, allowed)",
            wasm_allow_uncached,
            "ns",
        )
        .against("policy.check_native", "same decision in Rust", native_allow);
    report
        .figure(
            "policy",
            "policy.check_cached",
            "capability check answered from the decision cache (allowed)",
            wasm_allow,
            "ns",
        )
        .against("policy.check_native", "same decision in Rust", native_allow);
    Ok(())
}
