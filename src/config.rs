//! Reads `daemon.toml` into a validated `Config`; the rest of the code never sees raw TOML.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::paths;

/// Protocol versions of the handshake era that the mirror accepts from a server.
pub const DEFAULT_MAX_PAGES: u64 = 10_000;
pub const DEFAULT_MAX_ITEMS: u64 = 1_000_000;
pub const DEFAULT_PRIORITY: i64 = 100;

/// A configuration error that names the file, the line and the key at fault.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl ConfigError {
    fn render(&self) -> String {
        let mut text = self.file.display().to_string();
        if let Some(line) = self.line {
            text.push_str(&format!(":{line}"));
        }
        text.push_str(": ");
        if let Some(key) = &self.key {
            text.push_str(&format!("{key}: "));
        }
        text.push_str(&self.message);
        text
    }
}

/// A value that must never be printed: tokens and secret header values.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("Secret(<redacted>)")
    }
}

/// Limits that stop a walk from running away on a misbehaving server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkLimits {
    pub max_pages: u64,
    pub max_items: u64,
    /// Consecutive pages without a new URI that count as a cursor loop.
    pub max_pages_without_new: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file this configuration came from.
    pub source: PathBuf,
    pub daemon: DaemonConfig,
    pub servers: Vec<ServerConfig>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DaemonConfig {
    pub database: PathBuf,
    pub socket: PathBuf,
    pub resync_interval: Duration,
    pub request_timeout: Duration,
    /// How long the first message of a connection may wait for a server that starts slowly.
    pub connect_timeout: Duration,
    pub limits: WalkLimits,
    pub timings: SyncTimings,
    /// A server removed from the configuration keeps its snapshot, marked offline, instead of
    /// having it dropped.
    pub keep_removed: bool,
    /// A tracing filter (`info`, `mcp_mirror=debug,warn`); `RUST_LOG` overrides it.
    pub log_level: Option<String>,
}

/// How a session paces itself between walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncTimings {
    /// How often to re-walk a server that cannot push `list_changed`.
    pub poll_interval: Duration,
    /// The shortest poll a server's `ttlMs` hint may ask for.
    pub poll_floor: Duration,
    /// How often to ping a quiet server to notice a dead session; `None` turns pings off.
    pub ping_interval: Option<Duration>,
    /// The quiet period after a `list_changed` before walking.
    pub debounce: Duration,
}

/// Which protocol era to speak to a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EraChoice {
    /// Probe `server/discover` and fall back to `initialize`.
    Auto,
    Legacy,
    Modern,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    pub priority: i64,
    pub resync_interval: Duration,
    pub request_timeout: Duration,
    /// How long the first message of a connection may wait for a server that starts slowly.
    pub connect_timeout: Duration,
    pub limits: WalkLimits,
    /// The size cap of the `resources/read` content cache; `None` (the default) turns it off.
    pub read_cache_bytes: Option<u64>,
    pub timings: SyncTimings,
    pub era: EraChoice,
    /// A protocol version to insist on, instead of negotiating.
    pub protocol_version: Option<String>,
}

#[derive(Clone, PartialEq)]
pub enum Transport {
    Stdio {
        command: PathBuf,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        headers: Vec<(String, String)>,
        bearer_token: Option<Secret>,
    },
}

/// Every configured header value is treated as a secret (they often carry API keys, and a rule
/// with no exceptions cannot be forgotten), so Debug shows header names only.
impl fmt::Debug for Transport {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => formatter
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", env)
                .field("cwd", cwd)
                .finish(),
            Transport::Http {
                url,
                headers,
                bearer_token,
            } => {
                let header_names: Vec<String> = headers
                    .iter()
                    .map(|(name, _)| format!("{name}: <redacted>"))
                    .collect();
                formatter
                    .debug_struct("Http")
                    .field("url", url)
                    .field("headers", &header_names)
                    .field("bearer_token", bearer_token)
                    .finish()
            }
        }
    }
}

impl Config {
    /// The values that must never be printed: bearer tokens and every header value.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.servers
            .iter()
            .flat_map(|server| match &server.transport {
                Transport::Http {
                    headers,
                    bearer_token,
                    ..
                } => headers
                    .iter()
                    .map(|(_, value)| value.as_str())
                    .chain(bearer_token.as_ref().map(Secret::expose))
                    .collect(),
                Transport::Stdio { .. } => Vec::new(),
            })
    }
}

impl Transport {
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    daemon: RawDaemon,
    #[serde(default)]
    servers: BTreeMap<Spanned<String>, Spanned<RawServer>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    database: Option<Spanned<String>>,
    socket: Option<Spanned<String>>,
    resync_interval: Option<Spanned<String>>,
    request_timeout: Option<Spanned<String>>,
    connect_timeout: Option<Spanned<String>>,
    max_pages: Option<Spanned<i64>>,
    max_items: Option<Spanned<i64>>,
    max_pages_without_new: Option<Spanned<i64>>,
    poll_interval: Option<Spanned<String>>,
    poll_floor: Option<Spanned<String>>,
    ping_interval: Option<Spanned<String>>,
    debounce: Option<Spanned<String>>,
    keep_removed: Option<bool>,
    log_level: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    url: Option<Spanned<String>>,
    command: Option<Spanned<String>>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    bearer_token_env: Option<Spanned<String>>,
    bearer_token_file: Option<Spanned<String>>,
    priority: Option<i64>,
    resync_interval: Option<Spanned<String>>,
    request_timeout: Option<Spanned<String>>,
    connect_timeout: Option<Spanned<String>>,
    max_pages: Option<Spanned<i64>>,
    max_items: Option<Spanned<i64>>,
    read_cache: Option<Spanned<String>>,
    poll_interval: Option<Spanned<String>>,
    ping_interval: Option<Spanned<String>>,
    era: Option<Spanned<String>>,
    protocol_version: Option<Spanned<String>>,
}

/// Reads and validates the configuration file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError {
        file: path.to_path_buf(),
        line: None,
        key: None,
        message: format!("cannot read the configuration file: {error}"),
    })?;
    parse(path, &text, &|name| std::env::var(name).ok())
}

/// Parses configuration text; `path` names the file in errors and anchors relative paths.
pub fn parse(
    path: &Path,
    text: &str,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let context = Context { path, text };
    let raw: RawConfig = toml::from_str(text).map_err(|error| {
        // Quote the fragment only when it is a key: a value may be a token or header value.
        let key = error
            .span()
            .filter(|span| {
                text.get(span.end..)
                    .map(str::trim_start)
                    .is_some_and(|rest| rest.starts_with(['=', '.', ']']))
            })
            .and_then(|span| text.get(span))
            .filter(|fragment| {
                !fragment.trim().is_empty() && !fragment.contains('\n') && fragment.len() < 80
            })
            .map(|fragment| fragment.trim().to_string());
        ConfigError {
            file: path.to_path_buf(),
            line: error.span().map(|span| context.line_of(&span)),
            key,
            message: error.message().trim().to_string(),
        }
    })?;
    context.validate(raw, lookup_env)
}

struct Context<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Context<'_> {
    fn line_of(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text[..end].matches('\n').count() + 1
    }

    fn error(&self, span: &Range<usize>, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.path.to_path_buf(),
            line: Some(self.line_of(span)),
            key: Some(key.to_string()),
            message: message.into(),
        }
    }

    /// Resolves a path from the file relative to the directory the file is in.
    fn resolve(&self, value: &str) -> PathBuf {
        let candidate = PathBuf::from(value);
        if candidate.is_absolute() {
            return candidate;
        }
        let base = self.path.parent().unwrap_or(Path::new("."));
        let base = if base.as_os_str().is_empty() {
            Path::new(".")
        } else {
            base
        };
        base.join(candidate)
    }

    fn duration(
        &self,
        value: &Option<Spanned<String>>,
        key: &str,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        match value {
            None => Ok(default),
            Some(spanned) => parse_duration(spanned.get_ref())
                .map_err(|message| self.error(&spanned.span(), key, message)),
        }
    }

    fn count(
        &self,
        value: &Option<Spanned<i64>>,
        key: &str,
        default: u64,
    ) -> Result<u64, ConfigError> {
        match value {
            None => Ok(default),
            Some(spanned) if *spanned.get_ref() >= 1 => Ok(*spanned.get_ref() as u64),
            Some(spanned) => {
                Err(self.error(&spanned.span(), key, "must be a whole number of at least 1"))
            }
        }
    }

    fn validate(
        &self,
        raw: RawConfig,
        lookup_env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let daemon = &raw.daemon;
        let database = match &daemon.database {
            Some(value) => self.resolve(value.get_ref()),
            None => paths::default_database(),
        };
        let socket = match &daemon.socket {
            Some(value) => self.resolve(value.get_ref()),
            None => paths::default_socket(),
        };
        let resync_interval = self.duration(
            &daemon.resync_interval,
            "daemon.resync_interval",
            Duration::from_secs(15 * 60),
        )?;
        let request_timeout = self.duration(
            &daemon.request_timeout,
            "daemon.request_timeout",
            Duration::from_secs(30),
        )?;
        let connect_timeout = self.duration(
            &daemon.connect_timeout,
            "daemon.connect_timeout",
            Duration::from_secs(60),
        )?;
        let limits = WalkLimits {
            max_pages: self.count(&daemon.max_pages, "daemon.max_pages", DEFAULT_MAX_PAGES)?,
            max_items: self.count(&daemon.max_items, "daemon.max_items", DEFAULT_MAX_ITEMS)?,
            max_pages_without_new: self.count(
                &daemon.max_pages_without_new,
                "daemon.max_pages_without_new",
                3,
            )?,
        };
        let timings = SyncTimings {
            poll_interval: self.duration(
                &daemon.poll_interval,
                "daemon.poll_interval",
                Duration::from_secs(60),
            )?,
            poll_floor: self.duration(
                &daemon.poll_floor,
                "daemon.poll_floor",
                Duration::from_secs(5),
            )?,
            ping_interval: self.optional_duration(
                &daemon.ping_interval,
                "daemon.ping_interval",
                Some(Duration::from_secs(60)),
            )?,
            debounce: self.duration(
                &daemon.debounce,
                "daemon.debounce",
                Duration::from_millis(100),
            )?,
        };
        let log_level = match &daemon.log_level {
            None => None,
            Some(level) => {
                tracing_subscriber::EnvFilter::try_new(level.get_ref()).map_err(|error| {
                    self.error(
                        &level.span(),
                        "daemon.log_level",
                        format!("not a log filter (examples: info, debug, mcp_mirror=debug,warn): {error}"),
                    )
                })?;
                Some(level.get_ref().clone())
            }
        };
        let daemon_config = DaemonConfig {
            database,
            socket,
            resync_interval,
            request_timeout,
            connect_timeout,
            limits,
            timings,
            keep_removed: daemon.keep_removed.unwrap_or(false),
            log_level,
        };
        let mut servers = Vec::new();
        for (name, server) in &raw.servers {
            servers.push(self.validate_server(name, server, &daemon_config, lookup_env)?);
        }
        Ok(Config {
            source: self.path.to_path_buf(),
            daemon: daemon_config,
            servers,
        })
    }

    fn validate_server(
        &self,
        name: &Spanned<String>,
        server: &Spanned<RawServer>,
        daemon: &DaemonConfig,
        lookup_env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ServerConfig, ConfigError> {
        let key = format!("servers.{}", name.get_ref());
        let valid_name = !name.get_ref().is_empty()
            && name
                .get_ref()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid_name {
            return Err(self.error(
                &name.span(),
                &key,
                "a server name may use only letters, digits, '-', '_' and '.'",
            ));
        }
        let raw = server.get_ref();
        let key_of = |field: &str| format!("{key}.{field}");
        let transport = match (&raw.url, &raw.command) {
            (Some(_), Some(command)) => {
                return Err(self.error(
                    &command.span(),
                    &key,
                    "set either `url` (Streamable HTTP) or `command` (stdio), not both",
                ))
            }
            (None, None) => {
                return Err(self.error(
                    &server.span(),
                    &key,
                    "set `url` (Streamable HTTP) or `command` (stdio)",
                ))
            }
            (None, Some(command)) => {
                for (field, present) in [
                    ("headers", !raw.headers.is_empty()),
                    ("bearer_token_env", raw.bearer_token_env.is_some()),
                    ("bearer_token_file", raw.bearer_token_file.is_some()),
                ] {
                    if present {
                        return Err(self.error(
                            &command.span(),
                            &key_of(field),
                            "applies only to servers with a `url`",
                        ));
                    }
                }
                if command.get_ref().trim().is_empty() {
                    return Err(self.error(&command.span(), &key_of("command"), "is empty"));
                }
                // A command with a slash is a path; relative ones are relative to this file.
                let program = if command.get_ref().contains('/') {
                    self.resolve(command.get_ref())
                } else {
                    PathBuf::from(command.get_ref())
                };
                Transport::Stdio {
                    command: program,
                    args: raw.args.clone(),
                    env: raw.env.clone(),
                    cwd: raw.cwd.as_ref().map(|cwd| self.resolve(cwd.get_ref())),
                }
            }
            (Some(url), None) => {
                if !raw.args.is_empty() || !raw.env.is_empty() || raw.cwd.is_some() {
                    return Err(self.error(
                        &url.span(),
                        &key,
                        "`args`, `env` and `cwd` apply only to servers with a `command`",
                    ));
                }
                let parsed = reqwest::Url::parse(url.get_ref()).map_err(|error| {
                    self.error(
                        &url.span(),
                        &key_of("url"),
                        format!("not a valid URL: {error}"),
                    )
                })?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(self.error(
                        &url.span(),
                        &key_of("url"),
                        "must be an http:// or https:// URL",
                    ));
                }
                for header in raw.headers.keys() {
                    let valid = reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_ok();
                    if !valid {
                        return Err(self.error(
                            &server.span(),
                            &key_of("headers"),
                            format!("`{header}` is not a valid HTTP header name"),
                        ));
                    }
                }
                let bearer_token = match (&raw.bearer_token_env, &raw.bearer_token_file) {
                    (Some(_), Some(file)) => {
                        return Err(self.error(
                            &file.span(),
                            &key,
                            "set either `bearer_token_env` or `bearer_token_file`, not both",
                        ))
                    }
                    (Some(variable), None) => match lookup_env(variable.get_ref()) {
                        Some(token) if !token.trim().is_empty() => Some(Secret::new(token.trim())),
                        _ => {
                            return Err(self.error(
                                &variable.span(),
                                &key_of("bearer_token_env"),
                                format!("environment variable {} is not set", variable.get_ref()),
                            ))
                        }
                    },
                    (None, Some(file)) => {
                        let token_path =
                            self.resolve(&expand_credentials(file.get_ref(), lookup_env));
                        let token = std::fs::read_to_string(&token_path).map_err(|error| {
                            self.error(
                                &file.span(),
                                &key_of("bearer_token_file"),
                                format!("cannot read {}: {error}", token_path.display()),
                            )
                        })?;
                        Some(Secret::new(token.trim()))
                    }
                    (None, None) => None,
                };
                Transport::Http {
                    url: url.get_ref().clone(),
                    headers: raw.headers.clone().into_iter().collect(),
                    bearer_token,
                }
            }
        };
        let limits = WalkLimits {
            max_pages: self.count(
                &raw.max_pages,
                &key_of("max_pages"),
                daemon.limits.max_pages,
            )?,
            max_items: self.count(
                &raw.max_items,
                &key_of("max_items"),
                daemon.limits.max_items,
            )?,
            max_pages_without_new: daemon.limits.max_pages_without_new,
        };
        let timings = SyncTimings {
            poll_interval: self.duration(
                &raw.poll_interval,
                &key_of("poll_interval"),
                daemon.timings.poll_interval,
            )?,
            ping_interval: self.optional_duration(
                &raw.ping_interval,
                &key_of("ping_interval"),
                daemon.timings.ping_interval,
            )?,
            ..daemon.timings
        };
        let era = match &raw.era {
            None => EraChoice::Auto,
            Some(era) => match era.get_ref().as_str() {
                "auto" => EraChoice::Auto,
                "legacy" => EraChoice::Legacy,
                "modern" => EraChoice::Modern,
                other => {
                    return Err(self.error(
                        &era.span(),
                        &key_of("era"),
                        format!("`{other}` is not an era: use \"auto\", \"legacy\" or \"modern\""),
                    ))
                }
            },
        };
        let protocol_version = match &raw.protocol_version {
            None => None,
            Some(version) => {
                let known = crate::mcp::LEGACY_VERSIONS.contains(&version.get_ref().as_str())
                    || crate::mcp::MODERN_VERSIONS.contains(&version.get_ref().as_str());
                if !known {
                    return Err(self.error(
                        &version.span(),
                        &key_of("protocol_version"),
                        format!(
                            "unknown protocol version `{}` (known: {}, {})",
                            version.get_ref(),
                            crate::mcp::MODERN_VERSIONS.join(", "),
                            crate::mcp::LEGACY_VERSIONS.join(", ")
                        ),
                    ));
                }
                Some(version.get_ref().clone())
            }
        };
        Ok(ServerConfig {
            name: name.get_ref().clone(),
            transport,
            priority: raw.priority.unwrap_or(DEFAULT_PRIORITY),
            resync_interval: self.duration(
                &raw.resync_interval,
                &key_of("resync_interval"),
                daemon.resync_interval,
            )?,
            request_timeout: self.duration(
                &raw.request_timeout,
                &key_of("request_timeout"),
                daemon.request_timeout,
            )?,
            connect_timeout: self.duration(
                &raw.connect_timeout,
                &key_of("connect_timeout"),
                daemon.connect_timeout,
            )?,
            limits,
            read_cache_bytes: match &raw.read_cache {
                None => None,
                Some(size) => {
                    Some(parse_size(size.get_ref()).map_err(|message| {
                        self.error(&size.span(), &key_of("read_cache"), message)
                    })?)
                }
            },
            timings,
            era,
            protocol_version,
        })
    }

    /// Like `duration`, but `"off"` means none.
    fn optional_duration(
        &self,
        value: &Option<Spanned<String>>,
        key: &str,
        default: Option<Duration>,
    ) -> Result<Option<Duration>, ConfigError> {
        match value {
            Some(spanned) if spanned.get_ref().trim() == "off" => Ok(None),
            Some(_) => self.duration(value, key, Duration::ZERO).map(Some),
            None => Ok(default),
        }
    }
}

/// Expands `%d` and `$CREDENTIALS_DIRECTORY` to systemd's credentials directory.
fn expand_credentials(value: &str, lookup_env: &dyn Fn(&str) -> Option<String>) -> String {
    match lookup_env("CREDENTIALS_DIRECTORY") {
        Some(directory) => value
            .replace("%d", &directory)
            .replace("$CREDENTIALS_DIRECTORY", &directory),
        None => value.to_string(),
    }
}

/// Parses durations such as `500ms`, `30s`, `15m`, `1h30m` and `2d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("`{text}` is not a duration (examples: 500ms, 30s, 15m, 1h30m)");
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(invalid());
    }
    let mut total = Duration::ZERO;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_length = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = rest[..unit_length].trim();
        rest = &rest[unit_length..];
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            "d" => Duration::from_secs(number.saturating_mul(86_400)),
            _ => return Err(invalid()),
        };
        total = total.saturating_add(part);
    }
    if total.is_zero() {
        return Err(format!("`{text}` must be longer than zero"));
    }
    Ok(total)
}

/// Parses sizes such as `512KiB`, `10MiB`, `1GB` and `4096` (bytes).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let invalid = || format!("`{text}` is not a size (examples: 4096, 512KiB, 10MiB, 1GB)");
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    if digits == 0 {
        return Err(invalid());
    }
    let number: u64 = trimmed[..digits].parse().map_err(|_| invalid())?;
    let multiplier: u64 = match trimmed[digits..].trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        _ => return Err(invalid()),
    };
    match number.checked_mul(multiplier) {
        Some(0) => Err(format!(
            "`{text}` must be larger than zero (leave the key out to keep the cache off)"
        )),
        Some(bytes) => Ok(bytes),
        None => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<Config, ConfigError> {
        parse(Path::new("/etc/mcp-mirror/daemon.toml"), text, &|name| {
            (name == "SET_TOKEN").then(|| "s3cret".to_string())
        })
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("10MiB"), Ok(10 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("10 parsecs").is_err());
        assert!(parse_size("99999999999999999999GiB").is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("15").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn full_config_validates() {
        let config = parse_text(
            r#"
[daemon]
database = "state/catalog.db"
socket = "/run/m.sock"
resync_interval = "10m"
max_pages = 50

[servers.docs]
url = "https://example.com/mcp"
bearer_token_env = "SET_TOKEN"
headers = { "X-Team" = "search" }
priority = 10

[servers.local]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]
env = { LOG_LEVEL = "warn" }
max_items = 20
"#,
        )
        .expect("valid config");
        assert_eq!(
            config.daemon.database,
            PathBuf::from("/etc/mcp-mirror/state/catalog.db")
        );
        assert_eq!(config.daemon.resync_interval, Duration::from_secs(600));
        assert_eq!(config.servers.len(), 2);
        let docs = &config.servers[0];
        assert_eq!(docs.priority, 10);
        assert_eq!(docs.limits.max_pages, 50);
        match &docs.transport {
            Transport::Http { bearer_token, .. } => {
                assert_eq!(bearer_token.as_ref().map(Secret::expose), Some("s3cret"));
                assert!(!format!("{docs:?}").contains("s3cret"));
            }
            other => panic!("unexpected transport {other:?}"),
        }
        assert_eq!(config.servers[1].limits.max_items, 20);
        assert!(!config.daemon.keep_removed);
        let secrets: Vec<&str> = config.secrets().collect();
        assert_eq!(secrets, ["search", "s3cret"]);
        assert!(!format!("{config:?}").contains("search\""), "{config:?}");
    }

    #[test]
    fn daemon_keys_for_the_service() {
        let config =
            parse_text("[daemon]\nkeep_removed = true\nlog_level = \"mcp_mirror=debug,warn\"\n")
                .expect("valid config");
        assert!(config.daemon.keep_removed);
        assert_eq!(
            config.daemon.log_level.as_deref(),
            Some("mcp_mirror=debug,warn")
        );
        let error = parse_text("[daemon]\nlog_level = \"=[\"\n").expect_err("bad filter");
        assert!(
            error.to_string().contains(":2: daemon.log_level: "),
            "{error}"
        );
    }

    #[test]
    fn token_files_expand_the_credentials_directory() {
        let directory = tempfile::tempdir().expect("temp dir");
        std::fs::write(directory.path().join("docs-token"), "tok-from-credential\n")
            .expect("write");
        let credentials = directory.path().to_string_lossy().to_string();
        for reference in ["%d/docs-token", "$CREDENTIALS_DIRECTORY/docs-token"] {
            let text = format!("[servers.docs]\nurl = \"https://example.com/mcp\"\nbearer_token_file = \"{reference}\"\n");
            let config = parse(Path::new("/etc/mcp-mirror/daemon.toml"), &text, &|name| {
                (name == "CREDENTIALS_DIRECTORY").then(|| credentials.clone())
            })
            .expect("valid config");
            match &config.servers[0].transport {
                Transport::Http { bearer_token, .. } => assert_eq!(
                    bearer_token.as_ref().map(Secret::expose),
                    Some("tok-from-credential")
                ),
                other => panic!("unexpected transport {other:?}"),
            }
        }
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let cases = [
            (
                "[servers.a]\nurl = \"http://x/\"\ncommand = \"y\"\n",
                3,
                "servers.a",
            ),
            ("[daemon]\n\n[servers.a]\nargs = []\n", 3, "servers.a"),
            (
                "[servers.a]\nurl = \"http://x/\"\nbearer_token_env = \"NOPE\"\n",
                3,
                "servers.a.bearer_token_env",
            ),
            (
                "[daemon]\nresync_interval = \"soon\"\n",
                2,
                "daemon.resync_interval",
            ),
            ("[daemon]\nsurprise = 1\n", 2, "surprise"),
            ("[servers.a]\ncommand = \"x\"\nbogus = true\n", 3, "bogus"),
            ("[daemon\n", 1, ""),
        ];
        // A value is never quoted back: it may be a secret.
        let error = parse_text(
            "[servers.a]\nurl = \"http://x/\"\nheaders = { \"K\" = tok-unquoted-secret }\n",
        )
        .expect_err("unquoted value");
        assert!(
            !error.to_string().contains("tok-unquoted-secret"),
            "{error}"
        );
        for (text, line, key) in cases {
            let error = parse_text(text).expect_err(text);
            let rendered = error.to_string();
            assert!(
                rendered.starts_with(&format!("/etc/mcp-mirror/daemon.toml:{line}: ")),
                "{text:?} gave {rendered}"
            );
            assert!(rendered.contains(key), "{text:?} gave {rendered}");
        }
    }
}
