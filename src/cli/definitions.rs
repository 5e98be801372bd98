//! The commands for tools and prompts: `tools`, `prompts`, `show tool|prompt SERVER/NAME`, `drift` (a diff against the accepted version), `accept`.

use std::path::Path;

use serde_json::Value;

use super::client::Client;
use super::history::print_structural_diff;
use super::offline::{Catalog, DatabaseChoice, LIST_TIMEOUT};
use super::render::{escaped, print_fields, print_json, print_table};
use super::ClientError;
use crate::protocol::{self as wire, Kind};

/// The first line of a text, shortened for a table cell.
fn first_line(text: Option<&str>) -> String {
    let line = text
        .and_then(|text| text.lines().find(|line| !line.trim().is_empty()))
        .unwrap_or("")
        .trim();
    let short: String = line.chars().take(80).collect();
    escaped(&short).into_owned()
}

/// Every tool or prompt (of one server or all), following cursors.
fn all_entries(
    catalog: &mut Catalog,
    kind: Kind,
    server: Option<&str>,
) -> Result<Vec<wire::Definition>, ClientError> {
    let mut entries = Vec::new();
    let mut params = wire::EntriesParams {
        server: server.map(str::to_string),
        cursor: None,
    };
    loop {
        let (page, next) = catalog.entries_page(kind, &params)?;
        entries.extend(page);
        match next {
            Some(cursor) => params.cursor = Some(cursor),
            None => return Ok(entries),
        }
    }
}

/// `mcp-mirror tools` / `prompts`: one row per entry; from the database when no daemon runs.
pub fn list(
    socket: &Path,
    database: &DatabaseChoice,
    kind: Kind,
    server: Option<&str>,
    as_json: bool,
) -> Result<(), ClientError> {
    let mut catalog = Catalog::open(socket, database)?;
    if let Some(server) = server {
        // An empty table would say the server lists nothing; the name is wrong instead.
        catalog.require_server(server)?;
    }
    let entries = all_entries(&mut catalog, kind, server)?;
    if as_json {
        print_json(&entries);
        return Ok(());
    }
    let rows = entries
        .iter()
        .map(|entry| {
            vec![
                // Where it comes from: `demo`, or `demo via upstream` through a mirror.
                entry.fields.meta.attribution().unwrap_or_default(),
                escaped(&entry.name).into_owned(),
                first_line(entry.fields.description.as_deref()),
            ]
        })
        .collect();
    print_table(&["SERVER", "NAME", "DESCRIPTION"], rows);
    Ok(())
}

/// `mcp-mirror show tool SERVER/NAME`: the whole definition, schemas pretty-printed; from the
/// database when no daemon runs.
pub fn show(
    socket: &Path,
    database: &DatabaseChoice,
    kind: Kind,
    spec: &str,
    as_json: bool,
) -> Result<(), ClientError> {
    let Some((server, name)) = spec.split_once('/') else {
        return Err(ClientError::Usage(format!(
            "name the {kind} as SERVER/NAME, not {spec:?}"
        )));
    };
    let params = wire::EntryParams {
        server: server.to_string(),
        name: name.to_string(),
    };
    let details = Catalog::open(socket, database)?.entry(kind, &params)?;
    if as_json {
        print_json(&details);
        return Ok(());
    }
    let definition = &details.definition;
    let mut fields = vec![
        ("server".to_string(), details.server.clone()),
        ("name".to_string(), escaped(&details.name).into_owned()),
    ];
    for key in ["title", "description"] {
        if let Some(text) = definition[key].as_str() {
            fields.push((key.to_string(), escaped(text).into_owned()));
        }
    }
    print_fields(fields);
    if let Value::Object(object) = definition {
        for (key, value) in object {
            if matches!(key.as_str(), "name" | "title" | "description") {
                continue;
            }
            let pretty = serde_json::to_string_pretty(value).unwrap_or_default();
            println!("{}:\n{}", escaped(key), escaped(&pretty));
        }
    }
    Ok(())
}

/// `mcp-mirror accept`: record the current tools and prompts as accepted.
pub fn accept(socket: &Path, server: Option<&str>, as_json: bool) -> Result<(), ClientError> {
    let mut client = Client::connect(socket)?;
    let params = wire::ServerParams {
        server: server.map(str::to_string),
    };
    let result = client.call::<wire::CatalogAccept>(&params, Some(LIST_TIMEOUT))?;
    if as_json {
        print_json(&result);
    } else {
        println!("accepted {} tool and prompt definitions", result.accepted);
    }
    Ok(())
}

/// `mcp-mirror drift`: each tool and prompt that differs from its accepted definition, diffed
/// against that version as `diff` compares two versions, every page.
pub fn drift(socket: &Path, server: Option<&str>, as_json: bool) -> Result<(), ClientError> {
    let mut client = Client::connect(socket)?;
    let mut params = wire::DriftParams {
        server: server.map(str::to_string),
        ..wire::DriftParams::default()
    };
    let mut result = wire::DriftResult {
        drift: Vec::new(),
        next_cursor: None,
    };
    loop {
        let page = client.call::<wire::CatalogDrift>(&params, Some(LIST_TIMEOUT))?;
        result.drift.extend(page.drift);
        match page.next_cursor {
            Some(next) => params.cursor = Some(next),
            None => break,
        }
    }
    if as_json {
        print_json(&result);
        return Ok(());
    }
    if result.drift.is_empty() {
        println!("no drift from the accepted definitions");
        return Ok(());
    }
    println!(
        "drift: each tool and prompt diffed against its accepted version (`mcp-mirror diff` compares any two kept versions)"
    );
    for entry in &result.drift {
        let versions = match (entry.accepted_version, entry.current_version) {
            (Some(accepted), Some(current)) => {
                format!(" (accepted version {accepted}, current version {current})")
            }
            (Some(accepted), None) => format!(" (accepted version {accepted})"),
            (None, Some(current)) => format!(" (current version {current})"),
            (None, None) => String::new(),
        };
        println!(
            "{} {} {}/{}{versions}",
            entry.change,
            entry.kind,
            entry.server,
            escaped(&entry.name)
        );
        // Only a changed entry has two sides to diff; an added or removed one is the line above.
        if let Some(diff) = &entry.diff {
            print_structural_diff(diff, "  ");
        }
    }
    Ok(())
}
