//! `resources/list`, `resources/templates/list` and `catalog/list`: pages of the merged catalog
//! and of one server's own snapshot, from a `Reader`.

use crate::protocol::{
    self as wire, encode_cursor, ErrorData, ErrorObject, Kind, ListParams, ServerListParams,
    StoredObject, INVALID_PARAMS,
};
use crate::store::{CatalogRow, KeyedEntries, Reader};

use super::{internal, invalid_params, View};

/// A page of merged rows (resources or templates) as the view sees them (each key's winner
/// chosen among the servers the view sees), and the cursor to the next page (after the last
/// key read, whether the view sees a listing of it or not); written to the socket from the
/// stored texts (`stored`), or parsed for a caller that wants typed entries.
pub struct MergedPage {
    pub rows: Vec<CatalogRow>,
    next_cursor: Option<String>,
}

impl MergedPage {
    /// The rows read, less those of `kind` the view does not see (`hide_flagged_uris`).
    fn read(
        mut rows: Vec<CatalogRow>,
        next_after: Option<String>,
        view: &View,
        kind: Kind,
    ) -> MergedPage {
        rows.retain(|row| view.sees_entry(&row.server, kind, &row.raw));
        MergedPage {
            rows,
            next_cursor: next_after.map(|key| encode_cursor(&key)),
        }
    }

    /// The page's entries as the socket writes them: each from its stored text, with its origin.
    pub fn stored(&self) -> Vec<StoredObject<'_>> {
        self.rows
            .iter()
            .map(|row| StoredObject {
                raw: &row.raw,
                origin: Some(&row.server),
            })
            .collect()
    }

    pub fn next_cursor(&self) -> Option<String> {
        self.next_cursor.clone()
    }

    /// `resources/list` as the socket writes it.
    pub fn resources(&self) -> wire::ListResourcesResult<StoredObject<'_>> {
        wire::ListResourcesResult {
            resources: self.stored(),
            next_cursor: self.next_cursor(),
        }
    }

    /// `resources/templates/list` as the socket writes it.
    pub fn templates(&self) -> wire::ListTemplatesResult<StoredObject<'_>> {
        wire::ListTemplatesResult {
            resource_templates: self.stored(),
            next_cursor: self.next_cursor(),
        }
    }

    /// `resources/list` parsed, as a client reads it.
    pub fn typed_resources(&self) -> Result<wire::ListResourcesResult, ErrorObject> {
        let resources = self
            .rows
            .iter()
            .map(|row| wire::Resource::from_stored(&row.raw, Some(&row.server)))
            .collect::<Result<_, _>>()
            .map_err(internal)?;
        Ok(wire::ListResourcesResult {
            resources,
            next_cursor: self.next_cursor(),
        })
    }

    /// `resources/templates/list` parsed, as a client reads it.
    pub fn typed_templates(&self) -> Result<wire::ListTemplatesResult, ErrorObject> {
        let resource_templates = self
            .rows
            .iter()
            .map(|row| wire::ResourceTemplate::from_stored(&row.raw, Some(&row.server)))
            .collect::<Result<_, _>>()
            .map_err(internal)?;
        Ok(wire::ListTemplatesResult {
            resource_templates,
            next_cursor: self.next_cursor(),
        })
    }
}

/// `catalog/entries`: each found entry written as `resources/list` writes it (`read` chose each
/// key's winner among the servers the view sees). What the view may not see is reported as no
/// server listing it, and a count of the whole catalog cannot be checked against a part, so a
/// restricted view gets none.
pub fn keyed_entries_result<'a>(
    instance: &str,
    kind: Kind,
    read: &'a KeyedEntries,
    view: &View,
) -> wire::KeyedEntriesResult<StoredObject<'a>> {
    let (shown, withheld): (Vec<_>, Vec<_>) = read
        .found
        .iter()
        .partition(|row| view.sees_entry(&row.server, kind, &row.raw));
    let mut missing = read.missing.clone();
    missing.extend(withheld.into_iter().map(|row| row.key.clone()));
    wire::KeyedEntriesResult {
        instance: instance.to_string(),
        seq: read.seq,
        total: view.sees_whole_catalog().then_some(read.total),
        loading: loading_in_view(read, view),
        entries: shown
            .into_iter()
            .map(|row| StoredObject {
                raw: &row.raw,
                origin: Some(&row.server),
            })
            .collect(),
        missing,
    }
}

/// `catalog/entries` of tools or prompts: each found entry as `catalog/tools` writes it (with
/// its origin and its key), the rest as `keyed_entries_result` says.
pub fn keyed_definitions_result(
    instance: &str,
    kind: Kind,
    read: &KeyedEntries,
    view: &View,
) -> Result<wire::KeyedEntriesResult<wire::Definition>, ErrorObject> {
    let (shown, withheld): (Vec<_>, Vec<_>) = read
        .found
        .iter()
        .partition(|row| view.sees_entry(&row.server, kind, &row.raw));
    let mut missing = read.missing.clone();
    missing.extend(withheld.into_iter().map(|row| row.key.clone()));
    let entries = shown
        .into_iter()
        .map(|row| {
            let name = row.key.get(row.server.len() + 1..).unwrap_or_default();
            wire::Definition::served(&row.raw, &row.server, name)
        })
        .collect::<Result<_, _>>()
        .map_err(internal)?;
    Ok(wire::KeyedEntriesResult {
        instance: instance.to_string(),
        seq: read.seq,
        total: view.sees_whole_catalog().then_some(read.total),
        entries,
        missing,
        loading: loading_in_view(read, view),
    })
}

/// The servers still loading that the view names (a follower waits only for what it sees).
fn loading_in_view(read: &KeyedEntries, view: &View) -> Vec<String> {
    read.loading
        .iter()
        .filter(|server| view.sees_server(server))
        .cloned()
        .collect()
}

/// A page of the merged catalog, `page_size` entries read at most.
pub fn resources(
    reader: &Reader,
    params: &ListParams,
    page_size: usize,
    view: &View,
) -> Result<MergedPage, ErrorObject> {
    let after = params.after().map_err(invalid_params)?;
    let sees = |server: &str| view.sees(server, Kind::Resource);
    let (rows, next_after) = reader
        .list_resources(after.as_deref(), page_size, &sees)
        .map_err(internal)?;
    Ok(MergedPage::read(rows, next_after, view, Kind::Resource))
}

/// A page of the merged templates, `page_size` read at most.
pub fn templates(
    reader: &Reader,
    params: &ListParams,
    page_size: usize,
    view: &View,
) -> Result<MergedPage, ErrorObject> {
    let after = params.after().map_err(invalid_params)?;
    let sees = |server: &str| view.sees(server, Kind::Template);
    let (rows, next_after) = reader
        .list_templates(after.as_deref(), page_size, &sees)
        .map_err(internal)?;
    Ok(MergedPage::read(rows, next_after, view, Kind::Template))
}

/// The "no server named" error, as `catalog/refresh` and `catalog/list` answer it.
pub fn no_such_server(name: &str) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, format!("no server named {name}")).with_data(ErrorData {
        not_found: Some("server".into()),
        server: Some(name.into()),
        ..ErrorData::default()
    })
}

/// `catalog/list`: a page of one server's own snapshot, each entry naming the server that wins
/// its URI when that is another one (and the view sees it).
pub fn server_list(
    reader: &Reader,
    params: &ServerListParams,
    view: &View,
) -> Result<wire::ServerListResult, ErrorObject> {
    let (after, limit) = params.checked().map_err(invalid_params)?;
    // A server outside the view is as unknown as one never configured.
    if !view.sees(&params.server, Kind::Resource)
        || !reader.server_exists(&params.server).map_err(internal)?
    {
        return Err(no_such_server(&params.server));
    }
    let (rows, more) = reader
        .server_snapshot(&params.server, after.as_deref(), limit)
        .map_err(internal)?;
    let next_cursor = match more {
        true => rows.last().map(|row| encode_cursor(&row.uri)),
        false => None,
    };
    let resources = rows
        .into_iter()
        .filter(|row| view.sees_entry(&params.server, Kind::Resource, &row.raw))
        .map(|row| {
            Ok(wire::ServerListEntry {
                resource: wire::Resource::from_stored(&row.raw, Some(&params.server))?,
                // The winner's name is another server's: only when the view sees it.
                won_by: row
                    .won_by
                    .filter(|winner| view.sees(winner, Kind::Resource)),
            })
        })
        .collect::<Result<_, serde_json::Error>>()
        .map_err(internal)?;
    Ok(wire::ServerListResult {
        server: params.server.clone(),
        resources,
        next_cursor,
    })
}
