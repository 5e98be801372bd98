//! The search index as the socket reports it: its phase and size (`catalog/status`), and how a
//! search's hits matched the words (`catalog/search`).

use serde::{Deserialize, Serialize};

/// How the hits matched the words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatchMode {
    /// Every word (the last one as a prefix).
    All,
    /// Every word, some of five letters or more with one typo.
    Typo,
    /// No entry has every word; these have some of them.
    Any,
}

/// What the index is doing, as `catalog/status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum IndexPhase {
    /// Opened, its agreement with the store not yet checked.
    Opening,
    /// Up to date with the store: queries go to the index.
    Ready,
    /// Applying the diffs it missed.
    CatchingUp,
    /// Being rebuilt from every stored entry.
    Rebuilding { percent: u8 },
    /// Broken beyond repair until restart (the error is in the log); queries go to SQLite.
    Failed,
}

/// The index's state for status output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexStatus {
    #[serde(flatten)]
    pub phase: IndexPhase,
    /// The store generation the index reflects; `None` before its first commit.
    pub generation: Option<u64>,
    pub documents: u64,
    pub bytes: u64,
    /// The store's in-memory catalog version (`Store::catalog_version`) the index had caught
    /// up with at its last pass; a search wanting a newer one waits for the next pass.
    #[serde(skip)]
    pub caught_up: u64,
    /// The keeper is writing a diff that replaces all of one server's entries of a kind (a
    /// first load, a re-walk that changed much): the index's last commit is a consistent
    /// earlier catalog, which searches may answer from, saying so, until that diff commits.
    #[serde(skip)]
    pub replacing: bool,
    /// The most changed entries the keeper has held and applied in one commit since start
    /// (a catch-up applies a large swap in batches of a bounded size).
    #[serde(default)]
    pub largest_catch_up_batch: u64,
    /// While the keeper applies a large change in batches (`catching-up`): the generation of
    /// the last complete commit before it, which searches answer from meanwhile (saying so)
    /// rather than from a commit that holds part of the change. `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_generation: Option<u64>,
}

impl IndexStatus {
    /// True when the index answers for a catalog at in-memory `version` whose newest
    /// committed change is at `generation`. The generation is read from SQLite: a commit is
    /// visible to readers before the writer's `commit()` returns (and so before the version
    /// moves on), which the generation cannot miss.
    pub fn serves(&self, version: u64, generation: u64) -> bool {
        self.phase == IndexPhase::Ready
            && self.caught_up >= version
            && self
                .generation
                .is_some_and(|reflected| reflected >= generation)
    }
}
