//! How to reach one server: `command` (stdio) or `url` (Streamable HTTP) with its headers and
//! bearer token, read from the environment or a credentials file.

use std::path::PathBuf;

use secrecy::SecretString;
use toml::Spanned;

use super::server_table::ServerTable;
use super::source::{expand_credentials, SourceFile};
use super::{ConfigError, Transport};

/// Keys that only a server with a `url` may set.
const HTTP_ONLY_KEYS: [&str; 3] = ["headers", "bearer_token_env", "bearer_token_file"];

pub(super) fn transport(
    source: &SourceFile,
    server: &ServerTable,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Transport, ConfigError> {
    if let Some(url) = &server.raw.nats {
        return nats(source, server, url);
    }
    if let Some(bucket) = &server.raw.bucket {
        return Err(source.error(
            &bucket.span(),
            &server.key_of("bucket"),
            "applies only to servers with `nats`",
        ));
    }
    match (&server.raw.url, &server.raw.command) {
        (Some(_), Some(command)) => Err(source.error(
            &command.span(),
            &server.key,
            "set either `url` (Streamable HTTP) or `command` (stdio), not both",
        )),
        (None, None) => Err(source.error(
            &server.span,
            &server.key,
            "set `url` (Streamable HTTP) or `command` (stdio)",
        )),
        (None, Some(command)) => stdio(source, server, command),
        (Some(url), None) => http(source, server, url, lookup_env),
    }
}

fn stdio(
    source: &SourceFile,
    server: &ServerTable,
    command: &Spanned<String>,
) -> Result<Transport, ConfigError> {
    let raw = server.raw;
    let http_only_present = [
        !raw.headers.is_empty(),
        raw.bearer_token_env.is_some(),
        raw.bearer_token_file.is_some(),
    ];
    if let Some((field, _)) = HTTP_ONLY_KEYS
        .iter()
        .zip(http_only_present)
        .find(|(_, present)| *present)
    {
        return Err(source.error(
            &command.span(),
            &server.key_of(field),
            "applies only to servers with a `url`",
        ));
    }
    if command.get_ref().trim().is_empty() {
        return Err(source.error(&command.span(), &server.key_of("command"), "is empty"));
    }
    // A command with a slash is a path; relative ones are relative to this file.
    let program = if command.get_ref().contains('/') {
        source.resolve(command.get_ref())
    } else {
        PathBuf::from(command.get_ref())
    };
    Ok(Transport::Stdio {
        command: program,
        args: raw.args.clone(),
        env: raw.env.clone(),
        cwd: raw.cwd.as_ref().map(|cwd| source.resolve(cwd.get_ref())),
    })
}

fn http(
    source: &SourceFile,
    server: &ServerTable,
    url: &Spanned<String>,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Transport, ConfigError> {
    let raw = server.raw;
    if !raw.args.is_empty() || !raw.env.is_empty() || raw.cwd.is_some() {
        return Err(source.error(
            &url.span(),
            &server.key,
            "`args`, `env` and `cwd` apply only to servers with a `command`",
        ));
    }
    check_url(source, server, url)?;
    for header in raw.headers.keys() {
        if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
            return Err(source.error(
                &server.span,
                &server.key_of("headers"),
                format!("`{header}` is not a valid HTTP header name"),
            ));
        }
    }
    Ok(Transport::Http {
        url: url.get_ref().clone(),
        headers: raw.headers.clone().into_iter().collect(),
        bearer_token: bearer_token(source, server, lookup_env)?,
    })
}

fn check_url(
    source: &SourceFile,
    server: &ServerTable,
    url: &Spanned<String>,
) -> Result<(), ConfigError> {
    let error = |message: String| source.error(&url.span(), &server.key_of("url"), message);
    let parsed = reqwest::Url::parse(url.get_ref())
        .map_err(|problem| error(format!("not a valid URL: {problem}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(error("must be an http:// or https:// URL".into()));
    }
    Ok(())
}

/// The token from `bearer_token_env` or `bearer_token_file`, trimmed; at most one may be set.
fn bearer_token(
    source: &SourceFile,
    server: &ServerTable,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<SecretString>, ConfigError> {
    match (&server.raw.bearer_token_env, &server.raw.bearer_token_file) {
        (Some(_), Some(file)) => Err(source.error(
            &file.span(),
            &server.key,
            "set either `bearer_token_env` or `bearer_token_file`, not both",
        )),
        (Some(variable), None) => match lookup_env(variable.get_ref()) {
            Some(token) if !token.trim().is_empty() => Ok(Some(SecretString::from(token.trim()))),
            _ => Err(source.error(
                &variable.span(),
                &server.key_of("bearer_token_env"),
                format!("environment variable {} is not set", variable.get_ref()),
            )),
        },
        (None, Some(file)) => {
            let path = source.resolve(&expand_credentials(file.get_ref(), lookup_env));
            let token = std::fs::read_to_string(&path).map_err(|error| {
                source.error(
                    &file.span(),
                    &server.key_of("bearer_token_file"),
                    format!("cannot read {}: {error}", path.display()),
                )
            })?;
            Ok(Some(SecretString::from(token.trim())))
        }
        (None, None) => Ok(None),
    }
}

impl From<&Transport> for crate::protocol::TransportKind {
    fn from(transport: &Transport) -> crate::protocol::TransportKind {
        match transport {
            Transport::Stdio { .. } => crate::protocol::TransportKind::Stdio,
            Transport::Http { .. } => crate::protocol::TransportKind::Http,
            Transport::Nats { .. } => crate::protocol::TransportKind::Nats,
        }
    }
}

/// A server followed through a bucket: `nats` and `bucket`, and nothing of MCP's transports.
fn nats(
    source: &SourceFile,
    server: &ServerTable,
    url: &Spanned<String>,
) -> Result<Transport, ConfigError> {
    let raw = server.raw;
    let mcp_keys = [
        ("url", raw.url.is_some()),
        ("command", raw.command.is_some()),
        ("headers", !raw.headers.is_empty()),
        ("bearer_token_env", raw.bearer_token_env.is_some()),
        ("bearer_token_file", raw.bearer_token_file.is_some()),
    ];
    if let Some((field, _)) = mcp_keys.iter().find(|(_, present)| *present) {
        return Err(source.error(
            &url.span(),
            &server.key_of(field),
            "a server followed through `nats` has no MCP transport: set `nats` and `bucket` only",
        ));
    }
    super::nats::check_nats_url(source, url, &server.key_of("nats"))?;
    let Some(bucket) = &server.raw.bucket else {
        return Err(source.error(
            &url.span(),
            &server.key_of("bucket"),
            "a server with `nats` needs `bucket`, the published view it follows",
        ));
    };
    if !super::nats::valid_bucket(bucket.get_ref()) {
        return Err(source.error(
            &bucket.span(),
            &server.key_of("bucket"),
            "names a JetStream bucket: letters, digits, '-' and '_' only, at most 64",
        ));
    }
    Ok(Transport::Nats {
        url: url.get_ref().clone(),
        bucket: bucket.get_ref().clone(),
        credentials: None,
    })
}
