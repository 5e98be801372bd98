//! Shaping the store's rows into the protocol's results, for the daemon and the CLI offline alike.

use crate::protocol::{self as wire, encode_cursor, encode_search_cursor, StoredObject};
use crate::store::{self, CatalogRow, ListingRow};

/// A page of the merged catalog, with a cursor after its last URI when more follow; each
/// entry is written from its stored text.
pub fn resources_page(
    rows: &[CatalogRow],
    more: bool,
) -> wire::ListResourcesResult<StoredObject<'_>> {
    wire::ListResourcesResult {
        resources: stored_objects(rows),
        next_cursor: next_cursor(rows, more),
    }
}

pub fn templates_page(
    rows: &[CatalogRow],
    more: bool,
) -> wire::ListTemplatesResult<StoredObject<'_>> {
    wire::ListTemplatesResult {
        resource_templates: stored_objects(rows),
        next_cursor: next_cursor(rows, more),
    }
}

/// `catalog/entries`: each found entry written as `resources/list` writes it.
pub fn keyed_entries_result<'a>(
    instance: &str,
    read: &'a store::KeyedEntries,
) -> wire::KeyedEntriesResult<StoredObject<'a>> {
    wire::KeyedEntriesResult {
        instance: instance.to_string(),
        seq: read.seq,
        total: Some(read.total),
        entries: stored_objects(&read.found),
        missing: read.missing.clone(),
    }
}

fn stored_objects(rows: &[CatalogRow]) -> Vec<StoredObject<'_>> {
    rows.iter()
        .map(|row| StoredObject {
            raw: &row.raw,
            origin: Some(&row.server),
        })
        .collect()
}

fn next_cursor(rows: &[CatalogRow], more: bool) -> Option<String> {
    match more {
        true => rows.last().map(|row| encode_cursor(&row.key)),
        false => None,
    }
}

/// The winner (first listing) with its origin, and every listing; `None` when there is none.
pub fn resource_details(
    listings: Vec<ListingRow>,
) -> Result<Option<wire::ResourceDetails>, serde_json::Error> {
    let Some(winner) = listings.first() else {
        return Ok(None);
    };
    let resource = wire::Resource::from_stored(&winner.raw, Some(&winner.server))?;
    let (server, stale, snapshot_at_ms) =
        (winner.server.clone(), winner.stale, winner.snapshot_at_ms);
    let listed_by = listings
        .into_iter()
        .map(|listing| {
            Ok(wire::Listing {
                resource: wire::Resource::from_stored(&listing.raw, None)?,
                server: listing.server,
                priority: listing.priority,
            })
        })
        .collect::<Result<_, serde_json::Error>>()?;
    Ok(Some(wire::ResourceDetails {
        server,
        resource,
        stale,
        snapshot_at_ms,
        listed_by,
    }))
}

pub fn search_result(hits: Vec<store::SearchHit>, next: Option<usize>) -> wire::SearchResult {
    wire::SearchResult {
        results: hits
            .into_iter()
            .map(|hit| wire::SearchHit {
                meta: Some(wire::origin_meta(&hit.server)),
                // Tools and prompts have no URI.
                uri: matches!(hit.kind, wire::Kind::Resource | wire::Kind::Template)
                    .then_some(hit.uri),
                kind: hit.kind,
                server: hit.server,
                name: hit.name,
                title: hit.title,
                mime_type: hit.mime_type,
                description: hit.description,
                score: hit.score,
                snippet: hit.snippet,
            })
            .collect(),
        next_cursor: next.map(encode_search_cursor),
        engine: Some(wire::SearchEngine::Sqlite),
        match_mode: None,
        note: None,
    }
}

pub(super) fn changes_result(page: store::ChangePage) -> wire::ChangesResult {
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

/// A page of one server's own snapshot, with a cursor after its last URI when more follow.
pub fn server_list_result(
    server: String,
    rows: Vec<store::SnapshotRow>,
    more: bool,
) -> Result<wire::ServerListResult, serde_json::Error> {
    let next_cursor = match more {
        true => rows.last().map(|row| encode_cursor(&row.uri)),
        false => None,
    };
    let resources = rows
        .into_iter()
        .map(|row| {
            Ok(wire::ServerListEntry {
                resource: wire::Resource::from_stored(&row.raw, Some(&server))?,
                won_by: row.won_by,
            })
        })
        .collect::<Result<_, serde_json::Error>>()?;
    Ok(wire::ServerListResult {
        server,
        resources,
        next_cursor,
    })
}
