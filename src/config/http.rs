//! The `[http]` table: where the HTTP face listens, who may connect (bearer tokens from files,
//! allowed browser origins) and its bounds, validated into one `HttpConfig`.

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use toml::Spanned;

use super::raw::RawHttp;
use super::source::expand_credentials;
use super::source::SourceFile;
use super::values::{count, duration, optional_size};
use super::ConfigError;
use crate::protocol::Kind;

/// `[http] max_body`: the largest request body the HTTP face reads (the socket's line cap).
pub(crate) const DEFAULT_HTTP_MAX_BODY_BYTES: u64 = crate::protocol::MAX_LINE_BYTES as u64;
/// `[http] max_streams`: open SSE streams (GET streams and `subscriptions/listen`) at once.
pub(crate) const DEFAULT_HTTP_MAX_STREAMS: u64 = 256;
/// `[http] max_sessions`: handshake-era sessions (`Mcp-Session-Id`) remembered at once.
pub(crate) const DEFAULT_HTTP_MAX_SESSIONS: u64 = 1024;
/// `[http] max_connections`: open HTTP connections at once; more wait in the kernel's backlog.
pub(crate) const DEFAULT_HTTP_MAX_CONNECTIONS: u64 = 1024;
/// `[http] max_connections_per_peer`: open connections of one peer address (an IPv6 peer's
/// /64); more are answered 503 and closed at once, so one address cannot hold every permit.
pub(crate) const DEFAULT_HTTP_MAX_CONNECTIONS_PER_PEER: u64 = 128;
/// `[http] body_timeout`: the time a request's whole body may take to arrive after its head.
pub(crate) const DEFAULT_HTTP_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// `[http] write_stall_timeout`: how long an answer's bytes may wait for a client that reads
/// none of them; past it the connection is closed (a client that never reads cannot hold it).
pub(crate) const DEFAULT_HTTP_WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// `[http] session_idle_timeout`: a handshake-era session unused this long (and with no open
/// GET stream) is forgotten; its next request gets 404 and the client initializes again.
pub(crate) const DEFAULT_HTTP_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// `[http] max_sessions_per_client`: sessions of one client (its token and address, or its
/// address alone); its next `initialize` ends its least recently used session.
pub(crate) const DEFAULT_HTTP_MAX_SESSIONS_PER_CLIENT: u64 = 64;
/// `[http] max_streams_per_client`: open streams of one client (its token and address, or its
/// address alone); more get 503.
pub(crate) const DEFAULT_HTTP_MAX_STREAMS_PER_CLIENT: u64 = 32;

/// The HTTP face as configured; `listen: None` (the default) keeps it off.
#[derive(Clone, PartialEq)]
pub struct HttpConfig {
    pub listen: Option<SocketAddr>,
    /// `GET /metrics` alone on another address (e.g. loopback for a local Prometheus).
    pub metrics_listen: Option<SocketAddr>,
    pub tokens: Vec<HttpToken>,
    /// Browser origins (`scheme://host:port`) allowed to call; any other `Origin` gets 403.
    pub allowed_origins: Vec<String>,
    /// Host names (lowercase, without a port) a request's `Host` may name besides IP
    /// addresses and `localhost` (DNS rebinding); on a face with tokens, empty means any.
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    pub max_streams: usize,
    pub max_sessions: usize,
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    pub body_timeout: Duration,
    pub write_stall_timeout: Duration,
    pub session_idle_timeout: Duration,
    pub max_sessions_per_client: usize,
    pub max_streams_per_client: usize,
    /// Leave out of every answer the resources and templates whose URI points at the local
    /// machine or a private network (`io.mcp-mirror/uri` flags); a token may say otherwise.
    pub hide_flagged_uris: bool,
}

impl Default for HttpConfig {
    fn default() -> HttpConfig {
        HttpConfig {
            listen: None,
            metrics_listen: None,
            tokens: Vec::new(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: DEFAULT_HTTP_MAX_BODY_BYTES as usize,
            max_streams: DEFAULT_HTTP_MAX_STREAMS as usize,
            max_sessions: DEFAULT_HTTP_MAX_SESSIONS as usize,
            max_connections: DEFAULT_HTTP_MAX_CONNECTIONS as usize,
            max_connections_per_peer: DEFAULT_HTTP_MAX_CONNECTIONS_PER_PEER as usize,
            body_timeout: DEFAULT_HTTP_BODY_TIMEOUT,
            write_stall_timeout: DEFAULT_HTTP_WRITE_STALL_TIMEOUT,
            session_idle_timeout: DEFAULT_HTTP_SESSION_IDLE_TIMEOUT,
            max_sessions_per_client: DEFAULT_HTTP_MAX_SESSIONS_PER_CLIENT as usize,
            max_streams_per_client: DEFAULT_HTTP_MAX_STREAMS_PER_CLIENT as usize,
            hide_flagged_uris: false,
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
    /// Its own `hide_flagged_uris`; `None`: `[http] hide_flagged_uris`.
    pub hide_flagged_uris: Option<bool>,
}

impl PartialEq for HttpToken {
    fn eq(&self, other: &HttpToken) -> bool {
        self.name == other.name
            && self.value.expose_secret() == other.value.expose_secret()
            && (
                &self.servers,
                &self.kinds,
                self.mutate,
                self.hide_flagged_uris,
            ) == (
                &other.servers,
                &other.kinds,
                other.mutate,
                other.hide_flagged_uris,
            )
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
            .field("allowed_hosts", &self.allowed_hosts)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_peer", &self.max_connections_per_peer)
            .field("body_timeout", &self.body_timeout)
            .field("write_stall_timeout", &self.write_stall_timeout)
            .field("session_idle_timeout", &self.session_idle_timeout)
            .field("max_sessions_per_client", &self.max_sessions_per_client)
            .field("max_streams_per_client", &self.max_streams_per_client)
            .finish()
    }
}

// Over 100 lines on purpose: `[http]` validated key by key in one pass (tokens and their files'
// modes, addresses, bounds), each error naming its key from the one table's spans.
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
        // Like ssh with a private key: a token others may read or change is refused, not used.
        if let Ok(metadata) = std::fs::metadata(&path) {
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(source.error(
                    &span,
                    &key,
                    format!(
                        "{} is open to group or others (mode {mode:04o}): a token file must be private to the daemon's user (chmod 600 it)",
                        path.display()
                    ),
                ));
            }
        }
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
            hide_flagged_uris: file.hide_flagged_uris,
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
    let positive = |value: &Option<Spanned<String>>, key: &str, default: Duration| {
        let chosen = duration(source, value, key, default)?;
        match (chosen.is_zero(), value) {
            (true, Some(spanned)) => {
                Err(source.error(&spanned.span(), key, "must be longer than 0"))
            }
            _ => Ok(chosen),
        }
    };
    let mut allowed_hosts = Vec::new();
    for host in &raw.allowed_hosts {
        let name = host
            .get_ref()
            .trim()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if name.is_empty() || name.contains([':', '/', ' ', '[']) {
            return Err(source.error(
                &host.span(),
                "http.allowed_hosts",
                "not a host name (give names like \"mirror.internal\", without scheme or port)",
            ));
        }
        allowed_hosts.push(name);
    }
    let counted = |value: &Option<Spanned<i64>>, key: &str, default: u64| {
        count(source, value, key, default).map(|count| usize::try_from(count).unwrap_or(usize::MAX))
    };
    Ok(HttpConfig {
        listen,
        metrics_listen,
        tokens,
        allowed_origins: raw
            .allowed_origins
            .iter()
            .map(|origin| origin.trim_end_matches('/').to_ascii_lowercase())
            .collect(),
        allowed_hosts,
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
        max_connections: counted(
            &raw.max_connections,
            "http.max_connections",
            DEFAULT_HTTP_MAX_CONNECTIONS,
        )?,
        max_connections_per_peer: counted(
            &raw.max_connections_per_peer,
            "http.max_connections_per_peer",
            DEFAULT_HTTP_MAX_CONNECTIONS_PER_PEER,
        )?,
        body_timeout: positive(
            &raw.body_timeout,
            "http.body_timeout",
            DEFAULT_HTTP_BODY_TIMEOUT,
        )?,
        write_stall_timeout: positive(
            &raw.write_stall_timeout,
            "http.write_stall_timeout",
            DEFAULT_HTTP_WRITE_STALL_TIMEOUT,
        )?,
        session_idle_timeout: positive(
            &raw.session_idle_timeout,
            "http.session_idle_timeout",
            DEFAULT_HTTP_SESSION_IDLE_TIMEOUT,
        )?,
        hide_flagged_uris: raw.hide_flagged_uris.unwrap_or(false),
        max_sessions_per_client: counted(
            &raw.max_sessions_per_client,
            "http.max_sessions_per_client",
            DEFAULT_HTTP_MAX_SESSIONS_PER_CLIENT,
        )?,
        max_streams_per_client: counted(
            &raw.max_streams_per_client,
            "http.max_streams_per_client",
            DEFAULT_HTTP_MAX_STREAMS_PER_CLIENT,
        )?,
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
    use std::os::unix::fs::PermissionsExt;
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
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
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

    #[test]
    fn a_token_file_others_may_read_is_refused_like_ssh() {
        let directory = tempfile::tempdir().expect("temp dir");
        let file = directory.path().join("fleet");
        std::fs::write(&file, "tok-fleet-value\n").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let text = format!(
            "[http]\nlisten = \"0.0.0.0:8788\"\ntokens = {{ fleet = {:?} }}\n",
            file.display().to_string()
        );
        let error = parse(&text).expect_err("refused");
        assert_eq!(error.key.as_deref(), Some("http.tokens.fleet"));
        assert!(error.message.contains("mode 0644"), "{error}");
        assert!(error.message.contains("chmod 600"), "{error}");
        assert!(!error.message.contains("tok-fleet-value"), "{error}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).expect("chmod");
        parse(&text).expect("0400 is private");
    }

    #[test]
    fn the_face_bounds_have_keys_and_defaults() {
        let config = parse("[http]\nlisten = \"127.0.0.1:8788\"\n").expect("defaults");
        assert_eq!(config.http.max_connections, 1024);
        assert_eq!(config.http.max_connections_per_peer, 128);
        assert_eq!(config.http.body_timeout, std::time::Duration::from_secs(10));
        assert_eq!(
            config.http.write_stall_timeout,
            std::time::Duration::from_secs(30)
        );
        assert_eq!(
            config.http.session_idle_timeout,
            std::time::Duration::from_secs(1800)
        );
        assert_eq!(config.http.max_sessions_per_client, 64);
        assert_eq!(config.http.max_streams_per_client, 32);
        let config = parse(
            "[http]\nlisten = \"127.0.0.1:8788\"\nmax_connections = 64\nmax_connections_per_peer = 8\n\
             body_timeout = \"2s\"\nsession_idle_timeout = \"5m\"\nmax_sessions_per_client = 4\n\
             max_streams_per_client = 2\nallowed_hosts = [\"Mirror.Internal.\"]\n",
        )
        .expect("set");
        assert_eq!(config.http.max_connections, 64);
        assert_eq!(config.http.max_connections_per_peer, 8);
        assert_eq!(config.http.body_timeout, std::time::Duration::from_secs(2));
        assert_eq!(config.http.max_streams_per_client, 2);
        assert_eq!(
            config.http.allowed_hosts,
            vec!["mirror.internal".to_string()]
        );
        let zero = parse("[http]\nbody_timeout = \"0s\"\n").expect_err("zero");
        assert_eq!(zero.key.as_deref(), Some("http.body_timeout"));
        let port = parse("[http]\nallowed_hosts = [\"mirror:8788\"]\n").expect_err("port");
        assert_eq!(port.key.as_deref(), Some("http.allowed_hosts"));
    }
}
