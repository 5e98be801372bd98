//! The `[http]` table: where the HTTP face listens, who may connect (bearer tokens from files,
//! allowed browser origins) and its bounds, validated into one `HttpConfig`.

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;

use secrecy::{ExposeSecret, SecretString};
use toml::Spanned;

use super::raw::RawHttp;
use super::source::SourceFile;
use super::transport::expand_credentials;
use super::values::{count, optional_size};
use super::ConfigError;
use crate::protocol::Kind;

/// `[http] max_body`: the largest request body the HTTP face reads (the socket's line cap).
pub(crate) const DEFAULT_HTTP_MAX_BODY_BYTES: u64 = crate::protocol::MAX_LINE_BYTES as u64;
/// `[http] max_streams`: open SSE streams (GET streams and `subscriptions/listen`) at once.
pub(crate) const DEFAULT_HTTP_MAX_STREAMS: u64 = 256;
/// `[http] max_sessions`: handshake-era sessions (`Mcp-Session-Id`) remembered at once.
pub(crate) const DEFAULT_HTTP_MAX_SESSIONS: u64 = 1024;

/// The HTTP face as configured; `listen: None` (the default) keeps it off.
#[derive(Clone, PartialEq)]
pub struct HttpConfig {
    pub listen: Option<SocketAddr>,
    /// `GET /metrics` alone on another address (e.g. loopback for a local Prometheus).
    pub metrics_listen: Option<SocketAddr>,
    pub tokens: Vec<HttpToken>,
    /// Browser origins (`scheme://host:port`) allowed to call; any other `Origin` gets 403.
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub max_streams: usize,
    pub max_sessions: usize,
}

impl Default for HttpConfig {
    fn default() -> HttpConfig {
        HttpConfig {
            listen: None,
            metrics_listen: None,
            tokens: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: DEFAULT_HTTP_MAX_BODY_BYTES as usize,
            max_streams: DEFAULT_HTTP_MAX_STREAMS as usize,
            max_sessions: DEFAULT_HTTP_MAX_SESSIONS as usize,
        }
    }
}

/// One client token: its name (what the log shows), its value (never shown), and its view.
#[derive(Clone)]
pub struct HttpToken {
    pub name: String,
    pub value: SecretString,
    /// The servers it sees; `None`: every server.
    pub servers: Option<BTreeSet<String>>,
    /// The kinds it sees; `None`: every kind.
    pub kinds: Option<BTreeSet<Kind>>,
    /// It may call the methods that change the mirror's state (`catalog/refresh`, `/accept`).
    pub mutate: bool,
}

impl PartialEq for HttpToken {
    fn eq(&self, other: &HttpToken) -> bool {
        self.name == other.name
            && self.value.expose_secret() == other.value.expose_secret()
            && (&self.servers, &self.kinds, self.mutate)
                == (&other.servers, &other.kinds, other.mutate)
    }
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self
            .tokens
            .iter()
            .map(|token| token.name.as_str())
            .collect();
        formatter
            .debug_struct("HttpConfig")
            .field("listen", &self.listen)
            .field("metrics_listen", &self.metrics_listen)
            .field("tokens", &names)
            .field("allowed_origins", &self.allowed_origins)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_streams", &self.max_streams)
            .field("max_sessions", &self.max_sessions)
            .finish()
    }
}

pub(super) fn http_config(
    source: &SourceFile,
    raw: &RawHttp,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<HttpConfig, ConfigError> {
    let listen = address(source, &raw.listen, "http.listen")?;
    let metrics_listen = address(source, &raw.metrics_listen, "http.metrics_listen")?;
    let mut tokens = Vec::new();
    for (name, token) in &raw.tokens {
        let key = format!("http.tokens.{name}");
        let (file, span) = (token.get_ref(), token.span());
        let kinds = match &file.kinds {
            None => None,
            Some(kinds) => Some(
                kinds
                    .iter()
                    .map(|kind| {
                        kind.parse::<Kind>().map_err(|_| {
                            source.error(
                                &span,
                                &key,
                                format!("unknown kind {kind:?} in `kinds` (resource, template, tool, prompt)"),
                            )
                        })
                    })
                    .collect::<Result<BTreeSet<Kind>, ConfigError>>()?,
            ),
        };
        let path = source.resolve(&expand_credentials(&file.file, lookup_env));
        let text = std::fs::read_to_string(&path).map_err(|error| {
            source.error(
                &span,
                &key,
                format!("cannot read {}: {error}", path.display()),
            )
        })?;
        let value = text.trim();
        if value.is_empty() {
            return Err(source.error(&span, &key, format!("{} holds no token", path.display())));
        }
        tokens.push(HttpToken {
            name: name.clone(),
            value: SecretString::from(value),
            servers: file
                .servers
                .as_ref()
                .map(|servers| servers.iter().cloned().collect()),
            kinds,
            mutate: file.mutate,
        });
    }
    // Without tokens anyone who reaches the port reads the catalog: only loopback may do that.
    let addresses = [
        (listen, &raw.listen, "http.listen"),
        (metrics_listen, &raw.metrics_listen, "http.metrics_listen"),
    ];
    for (address, spanned, key) in addresses {
        if let (Some(address), Some(spanned)) = (address, spanned) {
            if tokens.is_empty() && !address.ip().is_loopback() {
                return Err(source.error(
                    &spanned.span(),
                    key,
                    "a non-loopback address needs `[http] tokens` (anyone who reaches it could read the catalog)",
                ));
            }
        }
    }
    let max_body_bytes = optional_size(source, &raw.max_body, "http.max_body")?
        .unwrap_or(DEFAULT_HTTP_MAX_BODY_BYTES);
    Ok(HttpConfig {
        listen,
        metrics_listen,
        tokens,
        allowed_origins: raw
            .allowed_origins
            .iter()
            .map(|origin| origin.trim_end_matches('/').to_ascii_lowercase())
            .collect(),
        max_body_bytes: usize::try_from(max_body_bytes).unwrap_or(usize::MAX),
        max_streams: count(
            source,
            &raw.max_streams,
            "http.max_streams",
            DEFAULT_HTTP_MAX_STREAMS,
        )? as usize,
        max_sessions: count(
            source,
            &raw.max_sessions,
            "http.max_sessions",
            DEFAULT_HTTP_MAX_SESSIONS,
        )? as usize,
    })
}

fn address(
    source: &SourceFile,
    value: &Option<Spanned<String>>,
    key: &str,
) -> Result<Option<SocketAddr>, ConfigError> {
    value
        .as_ref()
        .map(|text| {
            text.get_ref().parse::<SocketAddr>().map_err(|_| {
                source.error(
                    &text.span(),
                    key,
                    "not an IP address with a port (examples: 127.0.0.1:8788, [::1]:8788, 0.0.0.0:8788)",
                )
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn parse(text: &str) -> Result<crate::config::Config, crate::config::ConfigError> {
        crate::config::parse(Path::new("/etc/mcp-mirror/daemon.toml"), text, &|_| None)
    }

    #[test]
    fn http_is_off_by_default_and_loopback_needs_no_tokens() {
        let config = parse("").expect("empty config");
        assert_eq!(config.http.listen, None);
        let config = parse("[http]\nlisten = \"127.0.0.1:8788\"\n").expect("loopback");
        assert_eq!(
            config.http.listen,
            Some("127.0.0.1:8788".parse().expect("addr"))
        );
        assert_eq!(config.http.max_body_bytes, 1 << 20);
    }

    #[test]
    fn a_public_address_without_tokens_is_refused() {
        let error = parse("[http]\nlisten = \"0.0.0.0:8788\"\n").expect_err("refused");
        assert_eq!(error.key.as_deref(), Some("http.listen"));
        assert!(error.message.contains("tokens"), "{error}");
    }

    #[test]
    fn tokens_come_from_files_and_stay_secret() {
        let directory = tempfile::tempdir().expect("temp dir");
        let file = directory.path().join("fleet");
        std::fs::write(&file, "tok-fleet-value\n").expect("write");
        let text = format!(
            "[http]\nlisten = \"0.0.0.0:8788\"\ntokens = {{ fleet = {:?} }}\n",
            file.display().to_string()
        );
        let config = parse(&text).expect("valid");
        assert_eq!(config.http.tokens.len(), 1);
        assert_eq!(config.http.tokens[0].name, "fleet");
        assert!(!format!("{config:?}").contains("tok-fleet-value"));
        assert!(config.secrets().any(|secret| secret == "tok-fleet-value"));
        let missing = parse("[http]\ntokens = { gone = \"/nonexistent/token\" }\n")
            .expect_err("missing file");
        assert_eq!(missing.key.as_deref(), Some("http.tokens.gone"));
    }
}
