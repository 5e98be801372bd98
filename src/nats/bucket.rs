//! The connection to NATS (URL and credentials, within `CONNECT_TIMEOUT`), a bucket's keys (an entry's kind and a digest of its key) and its state, and the feed mark an upstream keeps beside its entries.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use serde::{Deserialize, Serialize};

use super::NatsError;
use crate::protocol::Kind;

/// The key of the publisher's mark: its database and the feed seq the bucket reflects. It is
/// no entry's key (entries' keys start with their kind), so a follower skips it as an entry.
pub const FEED_KEY: &str = "mirror.feed";

/// How long a connect may take before it is reported as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the publisher keeps under `FEED_KEY`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FeedMark {
    /// The publishing database (`mirror_identity`): a follower records it in each entry's
    /// chain of mirrors, as it does for an upstream it follows over HTTP.
    pub instance: String,
    /// The newest change of the publisher's feed the bucket reflects.
    pub seq: i64,
}

/// The key of an entry in a bucket: `<kind>.<XXH3-128 of its key, hex>`.
pub fn bucket_key(kind: Kind, key: &str) -> String {
    format!(
        "{kind}.{:032x}",
        xxhash_rust::xxh3::xxh3_128(key.as_bytes())
    )
}

/// The kind of an entry's bucket key; `None` for a key that is no entry's (`FEED_KEY`).
pub fn kind_of_bucket_key(key: &str) -> Option<Kind> {
    let (kind, digest) = key.split_once('.')?;
    (digest.len() == 32 && digest.bytes().all(|byte| byte.is_ascii_hexdigit()))
        .then(|| kind.parse().ok())
        .flatten()
}

/// Connects to `url` as the credentials file says: a NATS `.creds` file (a user JWT and its
/// seed), else one line `USER:PASSWORD`. `reconnects` counts the client's reconnections.
pub async fn connect(
    url: &str,
    credentials: Option<&Path>,
    reconnects: Arc<AtomicU64>,
) -> Result<async_nats::Client, NatsError> {
    let mut options = async_nats::ConnectOptions::new()
        .connection_timeout(CONNECT_TIMEOUT)
        .event_callback(move |event| {
            let reconnects = reconnects.clone();
            async move {
                if matches!(event, async_nats::Event::Connected) {
                    reconnects.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    if let Some(path) = credentials {
        let unreadable = |reason: String| NatsError::Credentials {
            path: path.display().to_string(),
            reason,
        };
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|error| unreadable(error.to_string()))?;
        options = if text.contains("-----BEGIN NATS USER JWT-----") {
            options
                .credentials(&text)
                .map_err(|_| unreadable("not a NATS credentials file".into()))?
        } else {
            match text.trim().split_once(':') {
                Some((user, password)) if !user.is_empty() => {
                    options.user_and_password(user.to_string(), password.to_string())
                }
                _ => return Err(unreadable("neither a .creds file nor USER:PASSWORD".into())),
            }
        };
    }
    options
        .connect(url)
        .await
        .map_err(|error| NatsError::Connect {
            url: crate::redact::printable(url).into_owned(),
            reason: error.to_string(),
        })
}

/// The bucket of a view, which must exist (a follower never creates one).
pub async fn open_bucket(
    client: &async_nats::Client,
    bucket: &str,
) -> Result<kv::Store, NatsError> {
    async_nats::jetstream::new(client.clone())
        .get_key_value(bucket)
        .await
        .map_err(|error| NatsError::Bucket {
            bucket: bucket.to_string(),
            reason: error.to_string(),
        })
}

/// Where a bucket stands: the identity of its stream (its creation time: a bucket deleted and
/// made again starts its revisions over), its oldest and newest revision.
pub struct BucketState {
    pub instance: String,
    pub first_revision: u64,
    pub last_revision: u64,
    pub values: u64,
}

pub async fn bucket_state(store: &kv::Store, bucket: &str) -> Result<BucketState, NatsError> {
    let status = store.status().await.map_err(|error| NatsError::Bucket {
        bucket: bucket.to_string(),
        reason: error.to_string(),
    })?;
    let info = &status.info;
    Ok(BucketState {
        instance: format!("nats:{bucket}:{}", info.created.unix_timestamp_nanos()),
        first_revision: info.state.first_sequence,
        last_revision: info.state.last_sequence,
        values: info.state.messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_key_names_its_kind_and_only_allowed_bytes() {
        let key = bucket_key(Kind::Resource, "file:///a b?c=d#é");
        assert!(key.starts_with("resource."));
        assert!(key
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-/_=.".contains(&byte)));
        assert_eq!(kind_of_bucket_key(&key), Some(Kind::Resource));
        assert_eq!(kind_of_bucket_key(FEED_KEY), None);
        assert_ne!(key, bucket_key(Kind::Template, "file:///a b?c=d#é"));
    }
}
