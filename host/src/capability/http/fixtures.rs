//! The `http` capability's fixtures: the backend of an offline call (`outbox plugins call`).
//!
//! Owns [`HttpFixture`] (one canned answer, as `--http-fixtures` gives it) and [`FixtureHttp`],
//! which answers a request that passed the checks and the policy with the first fixture of the
//! same method and URL, or refuses it, and writes each answer down as an [`OfflineCall::Http`].
//! It never opens a socket, never resolves a name and never reads a signing secret.

use std::collections::BTreeMap;

use futures::future::BoxFuture;

use super::{CheckedRequest, HttpBackend};
use crate::capability::offline::{OfflineCall, OfflineLog};
use crate::plugin::bindings::handler_world::outbox::plugin::http as wit_http;

/// Most HTTP fixtures one offline run accepts.
pub const MAX_HTTP_FIXTURES: usize = 1000;

/// One canned answer to an HTTP request of an offline call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpFixture {
    /// The method it answers (any when absent), case-insensitive.
    #[serde(default)]
    pub method: Option<String>,
    /// The URL it answers, exactly as the plugin sends it.
    pub url: String,
    /// The status of the answer (default 200).
    #[serde(default = "ok_status")]
    pub status: u16,
    /// The headers of the answer.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The body: a string as is, any other JSON value as its JSON text (default empty).
    #[serde(default)]
    pub body: Option<serde_json::Value>,
}

fn ok_status() -> u16 {
    200
}

impl HttpFixture {
    fn answers(&self, method: &str, url: &str) -> bool {
        self.url == url
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
    }

    fn response(&self) -> wit_http::Response {
        let body = match &self.body {
            None => Vec::new(),
            Some(serde_json::Value::String(s)) => s.clone().into_bytes(),
            Some(other) => other.to_string().into_bytes(),
        };
        wit_http::Response {
            status: self.status,
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            body,
        }
    }
}

/// The http backend of an offline run: its fixtures.
pub(crate) struct FixtureHttp {
    fixtures: Vec<HttpFixture>,
    log: OfflineLog,
}

impl FixtureHttp {
    /// Requests answered by `fixtures` (at most [`MAX_HTTP_FIXTURES`], checked by the caller),
    /// written down in `log`.
    pub(crate) fn new(fixtures: Vec<HttpFixture>, log: OfflineLog) -> Self {
        Self { fixtures, log }
    }

    fn answer(&self, request: CheckedRequest) -> Result<wit_http::Response, String> {
        let method = request.method.as_str();
        let Some((index, fixture)) = self
            .fixtures
            .iter()
            .enumerate()
            .find(|(_, f)| f.answers(method, &request.raw_url))
        else {
            return Err(format!(
                "http: no fixture answers {method} {} (an offline call sends no request; give the answer in a fixture file with --http-fixtures)",
                request.raw_url
            ));
        };
        self.log.record(OfflineCall::Http {
            method: method.to_string(),
            url: request.raw_url,
            status: fixture.status,
            fixture: index,
        });
        Ok(fixture.response())
    }
}

impl HttpBackend for FixtureHttp {
    fn send<'a>(
        &'a self,
        _plugin: &'a str,
        request: CheckedRequest,
    ) -> BoxFuture<'a, Result<wit_http::Response, String>> {
        Box::pin(std::future::ready(self.answer(request)))
    }
}
