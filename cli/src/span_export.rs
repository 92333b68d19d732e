//! Span export: the log output on stderr, and the host's spans sent over OTLP (HTTP, protobuf)
//! when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.
//!
//! Owns the process's `tracing` subscriber. Log lines are written through
//! [`LogOutput`](crate::log_output::LogOutput), never straight to stderr, so a closed or full
//! stderr neither panics nor blocks the host; plugins' lines by a formatter of their own that
//! leaves their messages as the host escaped them (see [`log_lines`]). Without an endpoint it
//! is the log output alone: the host's spans are at debug level, so the log filter disables
//! them and they cost nothing. With one, a `tracing-opentelemetry` layer gets the host's spans
//! (`outbox_host` at debug level and above) and its info, warn and error events, through a
//! batch span processor (its own thread and HTTP client); `service.name` is
//! `OTEL_SERVICE_NAME` or `outbox`. The other `OTEL_*` variables of the exporter and the batch
//! processor apply. It never stops the command: an exporter that cannot be built is reported on
//! stderr and the command runs without it.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use outbox_host::plugin::PLUGIN_LOG_TARGET;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::log_output::LogOutput;

/// The variables that turn export on.
const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// `service.name` unless `OTEL_SERVICE_NAME` says otherwise.
const SERVICE_NAME: &str = "outbox";

/// The spans being exported; [`shutdown`](Self::shutdown) sends what is left.
pub struct SpanExport {
    provider: SdkTracerProvider,
}

impl SpanExport {
    /// Export the spans still buffered and stop the exporter (blocking work, done off the async
    /// executor).
    pub async fn shutdown(self) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = done {
            errln!("warning: exporting the last spans failed: {e}");
        }
    }
}

/// Install the subscriber: logs into `logs` (`RUST_LOG`, default `info,sqlx=warn`), plus span
/// export when an OTLP endpoint is set (`Some` then: shut it down before exiting).
pub fn init(logs: LogOutput) -> Option<SpanExport> {
    let log_filter = || {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "info,sqlx=warn".into())
    };
    // Colours only for a person at a terminal, never in a log file or a pipe.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let provider = endpoint_set().then(provider).and_then(|built| {
        built
            .inspect_err(|e| errln!("warning: spans are not exported: {e}"))
            .ok()
    });
    let spans = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("outbox"))
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.target().starts_with("outbox_host")
                    && (meta.is_span() || *meta.level() <= tracing::Level::INFO)
            }))
    });
    tracing_subscriber::registry()
        .with(log_lines(logs, ansi).with_filter(log_filter()))
        .with(spans)
        .init();
    provider.map(|provider| SpanExport { provider })
}

/// The log lines, one formatter for the host's own lines and one for the plugins' (target
/// [`PLUGIN_LOG_TARGET`]), alike but for one thing: the formatter's ANSI sanitization, which
/// writes a message character by character, is off for the plugins' lines, whose messages the
/// host has escaped already, more strictly (every control character; see
/// `outbox_host::plugin::limits::sanitize_log_message`). A plugin that logs every event then
/// costs one copy of its message, not a second pass over it.
fn log_lines<S>(logs: LogOutput, ansi: bool) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let is_plugin = |meta: &tracing::Metadata<'_>| meta.target() == PLUGIN_LOG_TARGET;
    let host = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(logs.clone())
        .with_filter(tracing_subscriber::filter::filter_fn(move |meta| {
            !is_plugin(meta)
        }));
    let plugins = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_ansi_sanitization(false)
        .with_writer(logs)
        .with_filter(tracing_subscriber::filter::filter_fn(is_plugin));
    host.and_then(plugins)
}

/// Whether an OTLP endpoint is set (to something).
fn endpoint_set() -> bool {
    ENDPOINT_VARS
        .iter()
        .any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()))
}

/// The tracer provider: OTLP over HTTP (protobuf) behind a batch span processor.
fn provider() -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()?;
    let service = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| SERVICE_NAME.to_string());
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(service).build())
        .build())
}
