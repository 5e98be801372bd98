//! `[nats]`: the NATS server a fleet fans out through (`url`, `credentials`), the views this
//! mirror publishes to JetStream key-value buckets (`[nats.publish.NAME]`), and the check of a
//! downstream server's `nats` and `bucket` keys.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::source::SourceFile;
use super::ConfigError;
use crate::protocol::Kind;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNats {
    pub url: Option<Spanned<String>>,
    pub credentials: Option<Spanned<String>>,
    #[serde(default)]
    pub publish: BTreeMap<Spanned<String>, Spanned<RawPublish>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPublish {
    pub servers: Option<Vec<String>>,
    pub kinds: Option<Vec<String>>,
}

/// `[nats]`, validated. Nothing is published and nothing connects while it is empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NatsConfig {
    /// Where the publisher connects (`nats://` or `tls://`).
    pub url: Option<String>,
    /// A NATS credentials file (`.creds`) or a `USER:PASSWORD` file, read at each connect and
    /// never logged; every connection of this daemon (publisher and followers) uses it.
    pub credentials: Option<PathBuf>,
    pub publish: Vec<PublishView>,
}

/// One published view: a bucket named after it holds the entries of its servers and kinds
/// that a token of the same servers and kinds would see.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishView {
    pub bucket: String,
    /// `None`: every server.
    pub servers: Option<BTreeSet<String>>,
    /// `None`: every kind.
    pub kinds: Option<BTreeSet<Kind>>,
}

/// A JetStream key-value bucket's name: letters, digits, '-' and '_' only.
pub(crate) fn valid_bucket(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

/// A NATS URL as the client takes it: `nats://` or `tls://` with a host.
pub(super) fn check_nats_url(
    source: &SourceFile,
    url: &Spanned<String>,
    key: &str,
) -> Result<(), ConfigError> {
    let error = |message: String| source.error(&url.span(), key, message);
    let parsed = reqwest::Url::parse(url.get_ref())
        .map_err(|problem| error(format!("not a valid URL: {problem}")))?;
    if !matches!(parsed.scheme(), "nats" | "tls") || parsed.host_str().is_none() {
        return Err(error(
            "must be a nats:// or tls:// URL with a host, such as nats://127.0.0.1:4222".into(),
        ));
    }
    Ok(())
}

pub(super) fn nats_config(source: &SourceFile, raw: &RawNats) -> Result<NatsConfig, ConfigError> {
    if let Some(url) = &raw.url {
        check_nats_url(source, url, "nats.url")?;
    }
    let credentials = raw
        .credentials
        .as_ref()
        .map(|file| source.resolve(file.get_ref()));
    let mut publish = Vec::new();
    for (name, table) in &raw.publish {
        let key = format!("nats.publish.{}", name.get_ref());
        if raw.url.is_none() {
            return Err(source.error(&name.span(), &key, "a published view needs `url` in [nats]"));
        }
        if !valid_bucket(name.get_ref()) {
            return Err(source.error(
                &name.span(),
                &key,
                "names a JetStream bucket: letters, digits, '-' and '_' only, at most 64",
            ));
        }
        let kinds = match &table.get_ref().kinds {
            None => None,
            Some(kinds) => Some(
                kinds
                    .iter()
                    .map(|kind| {
                        kind.parse::<Kind>().map_err(|_| {
                            source.error(
                                &table.span(),
                                &format!("{key}.kinds"),
                                format!("unknown kind {kind:?} (resource, template, tool, prompt)"),
                            )
                        })
                    })
                    .collect::<Result<BTreeSet<Kind>, ConfigError>>()?,
            ),
        };
        publish.push(PublishView {
            bucket: name.get_ref().clone(),
            servers: table
                .get_ref()
                .servers
                .as_ref()
                .map(|servers| servers.iter().cloned().collect()),
            kinds,
        });
    }
    Ok(NatsConfig {
        url: raw.url.as_ref().map(|url| url.get_ref().clone()),
        credentials,
        publish,
    })
}
