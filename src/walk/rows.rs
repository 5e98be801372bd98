//! A listed item made a row: the entry taken (`take_entry`: no entry of ours back, no secrets), a resource's or template's row with its URI flags, the keys a walk can use, and `Listed`, what the cursor walk asks of a row.

use serde_json::value::RawValue;
use serde_json::Value;

use crate::config::WalkLimits;
use crate::protocol::uri_flags::{classify, URI_FLAGS_META_KEY};
use crate::protocol::{Kind, MAX_KEY_BYTES};
use crate::store::entry::{fit_entry, whole_entry_hash};
use crate::store::uri_template::{TemplateError, UriTemplate};
use crate::store::{ResourceRow, TemplateRow};

/// A row of any kind, as the cursor walk tells entries apart.
pub(crate) trait Listed {
    /// What identifies the entry in its list (a URI, a URI template, a name).
    fn identity(&self) -> &str;
}

impl Listed for ResourceRow {
    fn identity(&self) -> &str {
        &self.uri
    }
}

impl Listed for TemplateRow {
    fn identity(&self) -> &str {
        &self.uri_template
    }
}

/// A listed entry as it enters the mirror, whichever way it comes (a walk, a followed feed):
/// `Err` with the item untouched when it came through this mirror already (a mirror never takes
/// back its own entries through a loop of mirrors); else with its upstream mirror, if any,
/// recorded in its chain, and scrubbed of configured secrets, whatever a server reflects. Its
/// URI flags are set as it is made storable (`store::entry::fit_entry`, which parses it anyway).
pub(crate) fn take_entry(
    item: Box<RawValue>,
    upstream_mirror: Option<&str>,
) -> Result<Box<RawValue>, Box<RawValue>> {
    if crate::protocol::came_through_us(item.get()) {
        return Err(item);
    }
    let item = match upstream_mirror {
        Some(upstream) => crate::protocol::through_mirror(item.get(), upstream).unwrap_or(item),
        None => item,
    };
    Ok(crate::redact::scrub_entry(item))
}

pub(super) fn text_field(object: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    object.get(key).and_then(Value::as_str).map(str::to_string)
}

pub(super) fn json_field(object: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    object
        .get(key)
        .filter(|value| !value.is_null())
        .map(Value::to_string)
}

/// The fields of a listed Resource the store keeps in columns, borrowed from its text.
/// Anything this cannot take (a field of another type, a repeated key) goes the long way.
#[derive(serde::Deserialize)]
pub(super) struct ListedResource<'a> {
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, rename = "mimeType")]
    mime_type: Option<String>,
    #[serde(default)]
    size: Option<Value>,
    #[serde(borrow, default)]
    annotations: Option<&'a RawValue>,
    #[serde(borrow, default)]
    icons: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

/// Whether a listed entry's key (a URI, a tool's or prompt's name, a followed mirror's key)
/// can be stored: not empty and within `MAX_KEY_BYTES`. A longer one could be neither asked
/// for by its key nor paged past (a list cursor holds the last key of its page), so its entry
/// is left out and counted in `lastWalk.skipped`.
pub(crate) fn usable_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_BYTES
}

/// Builds a store row from a listed Resource; `None` when it has no usable `uri`
/// (`usable_key`) or is longer than `max_entry_bytes`. An entry within the bound is stored as the server sent it
/// (`entry::whole_entry_hash`); one over the bound is stored trimmed and flagged.
pub fn resource_row(item: Box<RawValue>, max_entry_bytes: u64) -> Option<ResourceRow> {
    let text = item.get();
    if let Some(hash) = whole_entry_hash(text, max_entry_bytes) {
        let listed = serde_json::from_str::<ListedResource<'_>>(text)
            .ok()
            // An entry to flag, or whose server wrote our flags' key, is rewritten: `fit_entry`.
            .filter(|listed| {
                let flagged = listed
                    .uri
                    .as_deref()
                    .is_some_and(|uri| !classify(uri).is_empty());
                !flagged && !text.contains(URI_FLAGS_META_KEY)
            });
        if let Some(listed) = listed {
            let uri = listed.uri.filter(|uri| usable_key(uri))?;
            let json = |field: Option<&RawValue>| field.map(|value| value.get().to_string());
            return Some(ResourceRow {
                // `name` is required by the schema; a server that omits it still gets its URI shown.
                name: listed.name.unwrap_or_else(|| uri.clone()),
                title: listed.title,
                description: listed.description,
                mime_type: listed.mime_type,
                size: listed.size.as_ref().and_then(Value::as_i64),
                annotations: json(listed.annotations),
                icons: json(listed.icons),
                meta: json(listed.meta),
                hash,
                oversized: false,
                raw: Box::<str>::from(item).into_string(),
                uri,
            });
        }
    }
    let fitted = fit_entry(item.get(), Kind::Resource, max_entry_bytes)?;
    drop(item);
    let object = &fitted.object;
    let uri = text_field(object, "uri").filter(|uri| usable_key(uri))?;
    Some(ResourceRow {
        // `name` is required by the schema; a server that omits it still gets its URI shown.
        name: text_field(object, "name").unwrap_or_else(|| uri.clone()),
        title: text_field(object, "title"),
        description: text_field(object, "description"),
        mime_type: text_field(object, "mimeType"),
        size: object.get("size").and_then(Value::as_i64),
        annotations: json_field(object, "annotations"),
        icons: json_field(object, "icons"),
        meta: json_field(object, "_meta"),
        hash: fitted.hash,
        oversized: fitted.oversized,
        raw: fitted.raw,
        uri,
    })
}

/// Builds a store row from a listed ResourceTemplate: `Ok(None)` when it has no usable
/// `uriTemplate`, an error when the template is over `max_template_bytes` or
/// `max_template_expressions` (it would cost every read of an unlisted URI).
pub(crate) fn template_row(
    item: &RawValue,
    limits: &WalkLimits,
) -> Result<Option<TemplateRow>, TemplateError> {
    let Some(fitted) = fit_entry(item.get(), Kind::Template, limits.max_entry_bytes) else {
        return Ok(None);
    };
    let object = &fitted.object;
    let Some(uri_template) = text_field(object, "uriTemplate") else {
        return Ok(None);
    };
    // A template that does not parse for other reasons is stored as listed; it routes nothing.
    if let Err(error @ (TemplateError::TooLong { .. } | TemplateError::TooManyExpressions { .. })) =
        UriTemplate::parse_within(
            &uri_template,
            usize::try_from(limits.max_template_bytes).unwrap_or(usize::MAX),
            usize::try_from(limits.max_template_expressions).unwrap_or(usize::MAX),
        )
    {
        return Err(error);
    }
    Ok(Some(TemplateRow {
        name: text_field(object, "name").unwrap_or_else(|| uri_template.clone()),
        title: text_field(object, "title"),
        description: text_field(object, "description"),
        mime_type: text_field(object, "mimeType"),
        oversized: fitted.oversized,
        raw: fitted.raw,
        uri_template,
    }))
}
