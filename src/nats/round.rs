//! A round of the publisher's updates (its puts and deletes up to its `FEED_KEY` mark): gathered
//! whole and applied as one delta, so a client of the follower sees an upstream swap whole or
//! not at all. Each update is read and staged as it comes (`Follower::take`), so the commit at
//! the mark has little left to do; the round also keeps the last update of each key, which it is
//! staged from again at the commit when staging as the updates came cannot stand: a key updated
//! twice in the round (staging keeps a key's first row), or updates read under another
//! publisher's identity than the mark's (each entry records it in its chain of mirrors).

use std::collections::BTreeMap;

use async_nats::jetstream::kv;

use super::follow::ReadRows;
use super::{FeedMark, FEED_KEY};
use crate::protocol::Kind;
use crate::store::StagedWalk;

/// Keys of one round applied as one delta at most (as many as a follow of an upstream's feed
/// over HTTP applies as one delta, `MAX_DELTA_KEYS`): a larger round, or a backlog, is applied
/// in parts of this many keys.
pub const MAX_ROUND_KEYS: usize = 50_000;
/// Bytes of values (and keys) one round holds in memory at most before it is applied, so a
/// round of large entries is applied in parts of about this size.
pub const MAX_ROUND_BYTES: usize = 16 << 20;

/// The updates gathered since the last applied delta.
#[derive(Default)]
pub struct Round {
    /// The last update of each key (a key put twice, or put then deleted, counts once).
    latest: BTreeMap<String, kv::Entry>,
    bytes: usize,
    /// The newest update's revision, the updates pending after it, its publication time.
    newest: Option<(u64, u64, i128)>,
    /// The publisher's identity, when its mark came.
    upstream: Option<String>,
    /// The round read and staged as its updates came; `None` once that cannot stand.
    staging: Option<Staging>,
    restage: bool,
}

/// A round's updates read and staged.
pub(super) struct Staging {
    pub walk: StagedWalk,
    pub rows: ReadRows,
    /// Each bucket key and what its update made of it: an entry's kind and key, or nothing
    /// (a delete, or a value that is not an entry of the kind its key names).
    pub read: Vec<(String, Option<(Kind, String)>)>,
    /// The publisher's identity the rows were read with.
    read_with: Option<String>,
}

impl Staging {
    pub fn new(walk: StagedWalk, read_with: Option<String>) -> Staging {
        Staging {
            walk,
            rows: ReadRows::default(),
            read: Vec::new(),
            read_with,
        }
    }
}

impl Round {
    /// Adds an update; true once the round holds `MAX_ROUND_KEYS` keys or `MAX_ROUND_BYTES`
    /// (then it is applied without waiting for the mark).
    pub fn push(&mut self, entry: kv::Entry) -> bool {
        self.newest = Some((
            entry.revision,
            entry.delta,
            entry.created.unix_timestamp_nanos(),
        ));
        if entry.key == FEED_KEY {
            if let Ok(mark) = serde_json::from_slice::<FeedMark>(&entry.value) {
                self.upstream = Some(mark.instance);
            }
            return false;
        }
        self.bytes += entry.key.len() + entry.value.len();
        if let Some(old) = self.latest.insert(entry.key.clone(), entry) {
            self.bytes -= old.key.len() + old.value.len();
        }
        self.latest.len() >= MAX_ROUND_KEYS || self.bytes >= MAX_ROUND_BYTES
    }

    pub fn is_empty(&self) -> bool {
        self.newest.is_none()
    }

    pub(super) fn newest(&self) -> Option<(u64, u64, i128)> {
        self.newest
    }

    /// Where `entry` (not yet pushed) is to be read and staged as it comes: the round's staging,
    /// begun with `begin` under `upstream` for its first update; `None` for the mark, and
    /// from a key's second update on (the round is staged again at its commit).
    pub(super) fn staging_for(
        &mut self,
        entry: &kv::Entry,
        upstream: Option<&str>,
        begin: impl FnOnce() -> StagedWalk,
    ) -> Option<&mut Staging> {
        if entry.key == FEED_KEY || self.restage {
            return None;
        }
        if self.latest.contains_key(&entry.key) {
            self.restage = true;
            self.staging = None;
            return None;
        }
        Some(
            self.staging
                .get_or_insert_with(|| Staging::new(begin(), upstream.map(str::to_string))),
        )
    }

    /// The last update of each key, the publisher's identity from the mark, and the staging
    /// when it stands (read under that identity, no key updated twice).
    pub(super) fn into_parts(
        self,
    ) -> (BTreeMap<String, kv::Entry>, Option<String>, Option<Staging>) {
        let upstream = self.upstream;
        let staging = self
            .staging
            .filter(|staging| upstream.is_none() || staging.read_with == upstream);
        (self.latest, upstream, staging)
    }
}
