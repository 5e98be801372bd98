//! `catalog/changes` and where `catalog/watch` starts: the change feed from a `Reader`, after a sequence number or from a time on, with the summary of a time's window.

use crate::protocol::{self as wire, ChangesParams, ErrorObject, FeedStart};
use crate::store::{now_ms, ChangePage, Reader, WindowCount};

use super::{internal, invalid_params, View};

/// The feed after `since` (a sequence number, or the entries written from a time on, then
/// with their summary), only the entries of `kinds` when given, and those the view sees,
/// oldest first.
pub fn changes(
    reader: &Reader,
    params: &ChangesParams,
    view: &View,
) -> Result<wire::ChangesResult, ErrorObject> {
    let (start, limit) = params.checked(now_ms()).map_err(invalid_params)?;
    let (since, window) = match start {
        None => (None, None),
        Some(FeedStart::After(sequence)) => (Some(sequence), None),
        Some(FeedStart::AtOrAfterMs(at_ms)) => {
            let position = reader.feed_position_at(at_ms).map_err(internal)?;
            (Some(position.after_seq), Some((at_ms, position)))
        }
    };
    let kinds = params.kinds.as_deref();
    let page = reader.changes(since, limit, kinds).map_err(internal)?;
    let mut result = changes_result(page);
    result
        .changes
        .retain(|change| view.sees(&change.server, change.entry_kind));
    if let Some((since_ms, position)) = window {
        result.truncated |= position.pruned;
        let counts = reader
            .feed_window_counts(position.after_seq, result.latest_seq, kinds)
            .map_err(internal)?;
        result.summary = Some(summary(since_ms, position.after_seq, counts, view));
    }
    Ok(result)
}

/// `catalog/watch`: the sequence number a watch sends the changes after (`since`'s own, the
/// last one written before `since`'s time, or the newest when `since` is absent), and the
/// newest.
pub fn watch_start(
    reader: &Reader,
    params: &wire::WatchParams,
) -> Result<wire::WatchResult, ErrorObject> {
    let start = params.checked_since(now_ms()).map_err(invalid_params)?;
    let latest_seq = reader.latest_change_seq().map_err(internal)?;
    let since_seq = match start {
        None => latest_seq,
        Some(FeedStart::After(sequence)) => sequence,
        Some(FeedStart::AtOrAfterMs(at_ms)) => {
            reader.feed_position_at(at_ms).map_err(internal)?.after_seq
        }
    };
    Ok(wire::WatchResult {
        latest_seq,
        since_seq,
    })
}

/// A window's counts as the client's view sees them: per (server, entry kind), and in all.
fn summary(
    since_ms: i64,
    after_seq: i64,
    counts: Vec<WindowCount>,
    view: &View,
) -> wire::ChangesSummary {
    let seen = counts
        .into_iter()
        .filter(|count| view.sees(&count.server, count.entry_kind))
        .map(|count| (count.server, count.entry_kind, count.kind, count.changes));
    wire::ChangesSummary::tallied(since_ms, after_seq, seen)
}

/// A page of the feed as the socket answers it (and as `catalog/watch` notifies it).
pub fn changes_result(page: ChangePage) -> wire::ChangesResult {
    let next_since = match page.more {
        true => page.changes.last().map(|change| change.seq),
        false => None,
    };
    wire::ChangesResult {
        changes: page
            .changes
            .into_iter()
            .map(|change| wire::Change {
                seq: change.seq,
                at_ms: change.at_ms,
                server: change.server,
                kind: change.kind,
                uri: change.uri,
                count: change.count,
                entry_kind: change.entry_kind,
                name: change.name,
                fields: change.fields,
            })
            .collect(),
        latest_seq: page.latest_seq,
        truncated: page.truncated,
        more: page.more,
        instance: None,
        next_since,
        summary: None,
    }
}
