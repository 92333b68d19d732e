//! A TCP proxy in front of a service the tests use (Redis, PostgreSQL, NATS, RabbitMQ) that can
//! be cut and restored on the same port: a real outage as the host sees it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::{nats_url, rabbitmq_url, redis_url};

/// A TCP proxy in front of Redis or PostgreSQL that can be cut (connections dropped, port
/// closed) and restored on the same port: a real outage as the host sees it.
pub struct OutageProxy {
    port: u16,
    target: String,
    state: Arc<Mutex<Option<JoinHandle<()>>>>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl OutageProxy {
    /// Start a proxy to the local Redis on a free port.
    pub async fn redis() -> Self {
        Self::start(url_host_port(&redis_url(), 6379)).await
    }

    /// Start a proxy to the local NATS server on a free port.
    pub async fn nats() -> Self {
        Self::start(url_host_port(&nats_url(), 4222)).await
    }

    /// Start a proxy to the local RabbitMQ on a free port.
    pub async fn rabbitmq() -> Self {
        Self::start(url_host_port(&rabbitmq_url(), 5672)).await
    }

    /// Start a proxy to the local PostgreSQL on a free port.
    pub async fn postgres() -> Self {
        let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
        Self::start(url_host_port(&url, 5432)).await
    }

    async fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Self {
            port,
            target,
            state: Arc::default(),
            conns: Arc::default(),
        };
        proxy.serve(listener);
        proxy
    }

    /// `redis://127.0.0.1:PORT/` of the proxy.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `nats://127.0.0.1:PORT` of the proxy.
    pub fn nats_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// `url` (a RabbitMQ URL, `amqp://user:pass@host:port/vhost`) pointed at the proxy.
    pub fn amqp_url(&self, url: &str) -> String {
        self.postgres_url(url)
    }

    /// `url` (a PostgreSQL URL, or any `scheme://[user[:pass]@]host[:port][/path]`) pointed at
    /// the proxy instead.
    pub fn postgres_url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (creds, rest) = match rest.rsplit_once('@') {
            Some((c, r)) => (format!("{c}@"), r),
            None => (String::new(), rest),
        };
        let path = rest.find('/').map(|i| &rest[i..]).unwrap_or("");
        format!("{scheme}://{creds}127.0.0.1:{}{path}", self.port)
    }

    fn serve(&self, listener: TcpListener) {
        let target = self.target.clone();
        let conns = self.conns.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let target = target.clone();
                let handle = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns.lock().unwrap().push(handle);
            }
        });
        *self.state.lock().unwrap() = Some(task);
    }

    /// Cut Redis off: close the port and drop every open connection.
    pub fn cut(&self) {
        if let Some(task) = self.state.lock().unwrap().take() {
            task.abort();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    /// Bring Redis back on the same port.
    pub async fn restore(&self) {
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(e) if tries < 50 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("rebind proxy port {}: {e}", self.port),
            }
        };
        self.serve(listener);
    }
}

fn url_host_port(url: &str, default_port: u16) -> String {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let rest = rest.rsplit_once('@').map(|(_, r)| r).unwrap_or(rest);
    let hp = rest.split(['/', '?']).next().unwrap_or("127.0.0.1");
    if hp.contains(':') {
        hp.to_string()
    } else {
        format!("{hp}:{default_port}")
    }
}
