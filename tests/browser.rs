//! A real browser for the console's tests: Debian's headless `chromium` driven through
//! `chromedriver` (both installed by `scripts/test.sh`) with WebDriver, plus what the tests check
//! on every page: a screenshot saved under the test's output folder, text on the page, and no
//! error in the browser's console.
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL and Redis directly to check the host"
)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use tokio::process::{Child, Command};

/// A headless chromium and the chromedriver that drives it.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    driver_url: String,
    session: String,
    screenshot_dir: PathBuf,
    /// The screenshots taken, in order.
    pub screenshots: Vec<PathBuf>,
}

impl Browser {
    /// Start chromedriver on a free port and open a headless chromium session; screenshots go
    /// to `screenshot_dir` (created).
    pub async fn start(screenshot_dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect(
                "chromedriver (apt-get install chromium chromium-driver; scripts/test.sh does)",
            );
        let driver_url = format!("http://127.0.0.1:{port}");
        let start = Instant::now();
        loop {
            if let Ok(r) = reqwest::get(format!("{driver_url}/status")).await {
                if r.status().is_success() {
                    break;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "chromedriver did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"],
            }),
        );
        caps.insert("goog:loggingPrefs".into(), json!({ "browser": "ALL" }));
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&driver_url)
            .await
            .expect("open a chromium session");
        let session = client.session_id().await.unwrap().unwrap();
        std::fs::create_dir_all(screenshot_dir).unwrap();
        Self {
            client,
            driver,
            driver_url,
            session,
            screenshot_dir: screenshot_dir.to_path_buf(),
            screenshots: Vec::new(),
        }
    }

    /// Go to `url`.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// The element `css` names (waiting up to 10 s for it).
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        tokio::time::timeout(
            Duration::from_secs(10),
            self.client.wait().for_element(Locator::Css(css)),
        )
        .await
        .unwrap_or_else(|_| panic!("no {css} on the page"))
        .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
    }

    /// The visible text of the element `css` names.
    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.unwrap()
    }

    /// Click the element `css` names.
    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap();
    }

    /// Wait until the text of `css` satisfies `done` (the page refreshes itself).
    pub async fn wait_for_text(&self, css: &str, within: Duration, done: impl Fn(&str) -> bool) {
        let start = Instant::now();
        loop {
            if let Ok(element) = self.client.find(Locator::Css(css)).await {
                if let Ok(text) = element.text().await {
                    if done(&text) {
                        return;
                    }
                }
            }
            assert!(
                start.elapsed() < within,
                "{css} never showed what was expected; the page: {}",
                self.client.source().await.unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Save a screenshot of the page as `name.png` and check the page rendered: a PNG of some
    /// size, text in its body, and no error in the browser console since the last check.
    pub async fn screenshot(&mut self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.unwrap();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 10_000,
            "{name}: the screenshot is blank or tiny ({} bytes)",
            png.len()
        );
        let body = self.text("body").await;
        assert!(
            body.trim().len() > 40,
            "{name}: the page is empty: {body:?}"
        );
        let errors = self.console_errors().await;
        assert!(
            errors.is_empty(),
            "{name}: errors in the browser console: {errors:#?}"
        );
        let path = self.screenshot_dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        self.screenshots.push(path.clone());
        path
    }

    /// The browser console's errors (level SEVERE) since the last call.
    pub async fn console_errors(&self) -> Vec<Value> {
        let log: Value = reqwest::Client::new()
            .post(format!(
                "{}/session/{}/se/log",
                self.driver_url, self.session
            ))
            .json(&json!({ "type": "browser" }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        log["value"]
            .as_array()
            .unwrap_or_else(|| panic!("chromedriver's log answer: {log}"))
            .iter()
            .filter(|entry| entry["level"] == "SEVERE")
            .cloned()
            .collect()
    }

    /// The value of the session cookie `name` (HttpOnly cookies included).
    pub async fn cookie(&self, name: &str) -> Option<fantoccini::cookies::Cookie<'static>> {
        self.client.get_named_cookie(name).await.ok()
    }

    /// Close the session and chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.close().await;
        let _ = self.driver.kill().await;
    }
}
