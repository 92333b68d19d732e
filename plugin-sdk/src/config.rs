//! The plugin's own configuration, as written in `routes.toml`.

use std::fmt;

use serde::de::DeserializeOwned;

/// A plugin's JSON config, passed by the host on every call.
///
/// Parse it into your own type with [`Config::parse`]. An empty config string reads as `{}`, so
/// a config struct whose fields all have defaults works without any config at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config(String);

impl Config {
    /// Wrap a JSON config string.
    pub fn new(json: impl Into<String>) -> Self {
        Self(json.into())
    }

    /// The raw JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Deserialize the config into `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        let json = if self.0.trim().is_empty() {
            "{}"
        } else {
            self.0.as_str()
        };
        serde_json::from_str(json).map_err(ConfigError)
    }
}

/// The config is not valid JSON or does not have the shape the plugin expects.
#[derive(Debug)]
pub struct ConfigError(serde_json::Error);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid plugin config: {}", self.0)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}
