//! The index's directory on disk: open an existing index (checking its schema and payload),
//! create one in a directory marked ours, reset it, read its payload and size.

use std::path::Path;

use tantivy::Index;

use super::index::{Payload, MARKER_FILE};
use super::schema::{Fields, SCHEMA_VERSION};
use super::*;

pub(super) fn open_existing(directory: &Path, fields: &Fields) -> Result<Option<Index>, String> {
    if !directory.join("meta.json").exists() {
        return Ok(None);
    }
    let index = directory::UnsyncedDirectory::open(directory)
        .and_then(Index::open)
        .map_err(|error| format!("cannot open it: {error}"))?;
    if index.schema() != fields.schema {
        return Err("its fields are from another version".into());
    }
    match read_payload(&index) {
        Some(payload) if payload.schema == SCHEMA_VERSION => {}
        Some(payload) => {
            return Err(format!(
                "its schema version is {}, this mcp-mirror uses {SCHEMA_VERSION}",
                payload.schema
            ))
        }
        None if index.load_metas().map(|meta| meta.opstamp).unwrap_or(0) == 0 => {}
        None => return Err("its commit records no generation".into()),
    }
    Fields::register_analyzer(&index);
    // Open every segment now: a corrupt file shows here rather than in the first search.
    let reader = index
        .reader()
        .map_err(|error| format!("cannot read it: {error}"))?;
    let searcher = reader.searcher();
    for segment in searcher.segment_readers() {
        segment
            .inverted_index(fields.all)
            .map_err(|error| format!("a segment is unreadable: {error}"))?;
    }
    Ok(Some(index))
}

pub(super) fn create(directory: &Path, fields: &Fields) -> Result<Index, SearchError> {
    std::fs::create_dir_all(directory).map_err(|source| SearchError::Io {
        action: "create the directory",
        path: directory.to_path_buf(),
        source,
    })?;
    let marker = directory.join(MARKER_FILE);
    let is_empty = std::fs::read_dir(directory)
        .map(|mut entries| entries.next().is_none())
        .unwrap_or(false);
    if !is_empty && !marker.exists() {
        return Err(SearchError::NotOurs {
            path: directory.to_path_buf(),
        });
    }
    std::fs::write(
        &marker,
        "The search index of mcp-mirror, derived from the database beside it; safe to delete.\n",
    )
    .map_err(|source| SearchError::Io {
        action: "write",
        path: marker.clone(),
        source,
    })?;
    let index = Index::create(
        directory::UnsyncedDirectory::open(directory)?,
        fields.schema.clone(),
        tantivy::IndexSettings::default(),
    )?;
    Fields::register_analyzer(&index);
    Ok(index)
}

/// Empties an index directory of ours so a new index can be made there.
pub(super) fn reset(directory: &Path) -> Result<(), SearchError> {
    if !directory.join(MARKER_FILE).exists() {
        return Err(SearchError::NotOurs {
            path: directory.to_path_buf(),
        });
    }
    std::fs::remove_dir_all(directory).map_err(|source| SearchError::Io {
        action: "remove",
        path: directory.to_path_buf(),
        source,
    })
}

pub(super) fn read_payload(index: &Index) -> Option<Payload> {
    let meta = index.load_metas().ok()?;
    serde_json::from_str(meta.payload.as_deref()?).ok()
}

pub(super) fn directory_bytes(directory: &Path) -> u64 {
    std::fs::read_dir(directory)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.metadata().ok())
                .filter(|metadata| metadata.is_file())
                .map(|metadata| metadata.len())
                .sum()
        })
        .unwrap_or(0)
}
