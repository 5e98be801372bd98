//! The first load's tee to the search index: each staged page of a first load goes to the index
//! as it is written (paced by the walk's room there), and the load's end (promoted or dropped)
//! follows before the commit is announced.

use super::*;
use crate::store::{IndexEntry, LoadEvent, LoadFeed, ReadBackWatch};

/// A first load's page once staged: the pending load it went to and the ids its rows took
/// (consecutive, both ends included).
pub(super) struct PendingPage {
    pub(super) id: i64,
    pub(super) ids: (i64, i64),
}

/// Notes a staged page of a first load (`inserted` rows, the last ids of the load's ranges) and
/// returns where it went, or `None` when it added no rows. `tee_without_room` says the index
/// listens but had no room for this page and the walk did not wait for it
/// (`FIRST_LOAD_INDEX_LAG_ROWS`, `FIRST_LOAD_INDEX_HOLD`): the page is counted as unsent, and
/// the index reads it from the database after the commit.
pub(super) fn note_page(
    pending: &mut staged::PendingLoad,
    server: &str,
    inserted: i64,
    tee_without_room: bool,
) -> Option<PendingPage> {
    let last = pending.ranges.last().map_or(0, |range| range.1);
    let ids = (last - inserted + 1, last);
    if tee_without_room {
        if pending.unsent_pages == 0 {
            tracing::info!(server, lag_rows = crate::store::FIRST_LOAD_INDEX_LAG_ROWS, hold_s = crate::store::FIRST_LOAD_INDEX_HOLD.as_secs(), "the search index is behind this first load: the walk goes on without it, and the index reads the pages it had no room for from the database after the commit (the walk waits for it only past FIRST_LOAD_INDEX_LAG_ROWS such rows, and at most FIRST_LOAD_INDEX_HOLD in all)");
        }
        pending.unsent_pages += 1;
    }
    (inserted > 0).then_some(PendingPage {
        id: pending.id,
        ids,
    })
}

/// Sends a staged page of a first load to the index with the walk's room for it. Never waits:
/// the channel holds at most the walk's room.
pub(super) fn send_page(
    feed: &LoadFeed,
    page: PendingPage,
    server: &str,
    rows: Vec<ResourceRow>,
    room: OwnedSemaphorePermit,
) {
    let entries = rows
        .into_iter()
        .map(|row| IndexEntry::of_resource(server, row))
        .collect();
    let _ = feed.send(LoadEvent::Page {
        id: page.id,
        server: server.to_string(),
        ids: page.ids,
        entries,
        room,
    });
}

/// Tells the index how a first load ended (promoted with its ranges, or dropped); sent before
/// the announcement, so the index's next pass finds the load's end. A promoted load some of
/// whose pages went without the index begins a read-back (`read_back`) the index ends.
pub(super) fn send_end(
    feed: &LoadFeed,
    counts: &StagedCounts,
    committed: bool,
    read_back: &Arc<ReadBackWatch>,
) {
    let Some(pending) = &counts.pending else {
        return;
    };
    let _ = feed.send(if committed {
        LoadEvent::Promoted {
            id: pending.id,
            resources: counts.staged,
            ranges: pending.ranges.clone(),
            read_back: (pending.unsent_pages > 0).then(|| read_back.begin()),
        }
    } else {
        LoadEvent::Dropped { id: pending.id }
    });
}
