//! The one writer thread: stages walks (a first load straight into `resources`, pending) and swaps each complete walk in one transaction.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rusqlite::{params, Connection};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{broadcast, mpsc, oneshot, OwnedSemaphorePermit};

use super::{
    now_ms, CatalogChanged, EntryRow, RemovedServers, ResourceRow, ServerSync, ServerUpdate,
    StoreError, SwapOutcome, TemplateRow, WalkReport,
};
use crate::protocol::{ChangeKind, Kind, ServerState};

mod actor;
mod delta;
mod entry_swap;
mod feed;
pub(super) mod full_text;
mod history;
mod index_tee;
mod ops;
mod pending;
mod read_cache;
mod reload;
mod servers;
mod sql;
mod staged;
mod staging;
mod swap;
mod wal;

#[cfg(test)]
use actor::commit_walk;
pub(super) use actor::{Channels, Writer};
use entry_swap::swap_entries;
pub(super) use feed::advance_generation;
use feed::{prune_changes, record_truncated};
use feed::{CHANGES_PER_FIRST_LOAD, CHANGES_PER_SWAP};
#[cfg(test)]
use full_text::full_text_backlog;
use full_text::{index_full_text_batch, INDEXED};
use ops::Reply;
pub use ops::{Batch, Delta, DeltaOutcome, EntryDelta, WriteOp};
use pending::{discard_batch, leftover_snapshots, promote};
use read_cache::cache_contents;
use servers::{sync_servers, update_server};
#[cfg(test)]
use sql::full_scans;
use sql::{execute, query_one, server_id};
use staged::StagedCounts;
use staging::{discard_staging, stage_entries, stage_resources, stage_templates, STAGING_SCHEMA};
use swap::{swap, Committed};

pub use wal::WalWatch;
use wal::{WriteAheadLog, WAL_LIMIT_BYTES};

#[cfg(test)]
mod tests;
