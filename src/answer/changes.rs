//! `catalog/changes` and where `catalog/watch` starts: the change feed from a `Reader`.

use crate::protocol::{self as wire, ChangesParams, ErrorObject};
use crate::store::{ChangePage, Reader};

use super::{internal, invalid_params, View};

/// The feed after `since` (only the entries of `kinds` when given, and those the view sees),
/// oldest first.
pub fn changes(
    reader: &Reader,
    params: &ChangesParams,
    view: &View,
) -> Result<wire::ChangesResult, ErrorObject> {
    let (since, limit) = params.checked().map_err(invalid_params)?;
    let page = reader
        .changes(since, limit, params.kinds.as_deref())
        .map_err(internal)?;
    let mut result = changes_result(page);
    result
        .changes
        .retain(|change| view.sees(&change.server, change.entry_kind));
    Ok(result)
}

/// A page of the feed as the socket answers it (and as `catalog/watch` notifies it).
pub fn changes_result(page: ChangePage) -> wire::ChangesResult {
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
    }
}
