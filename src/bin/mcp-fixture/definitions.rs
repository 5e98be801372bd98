//! Tools and prompts of the fixture: `tools/list` paginated by `tools_page_size`, `prompts/list`, and which list_changed notifications a scenario change calls for.

use serde_json::{json, Value};

use crate::catalog::{base64_decode, base64_encode, Catalog, Scenario};
use crate::rpc::RpcError;

const TOOLS_CURSOR_PREFIX: &str = "mcp-fixture-tools:";

/// The `tools/list` page after `cursor`, `catalog.tools_page_size` tools per page.
pub fn list_tools(catalog: &Catalog, params: Option<&Value>) -> Result<Value, RpcError> {
    let offset = match params.and_then(|params| params.get("cursor")) {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) => decode(catalog, cursor)
            .ok_or_else(|| RpcError::invalid_params("invalid or stale tools cursor"))?,
        Some(_) => return Err(RpcError::invalid_params("cursor must be a string")),
    };
    let end = (offset + catalog.tools_page_size).min(catalog.tools.len());
    let mut result = json!({ "tools": catalog.tools[offset..end] });
    if let Some(revisions) = &catalog.tool_revisions {
        // A walk's later pages carry the revision its first page started.
        let revision = match offset {
            0 => revisions.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1,
            _ => revisions.load(std::sync::atomic::Ordering::SeqCst),
        };
        if let Some(tools) = result["tools"].as_array_mut() {
            for tool in tools {
                if let Some(Value::String(description)) = tool.get_mut("description") {
                    description.push_str(&format!(" (revision {revision})"));
                }
            }
        }
    }
    if end < catalog.tools.len() {
        let cursor = format!("{TOOLS_CURSOR_PREFIX}{}:{end}", catalog.version);
        result["nextCursor"] = json!(base64_encode(cursor.as_bytes()));
    }
    Ok(result)
}

fn decode(catalog: &Catalog, cursor: &str) -> Option<usize> {
    let text = String::from_utf8(base64_decode(cursor)?).ok()?;
    let (version, offset) = text.strip_prefix(TOOLS_CURSOR_PREFIX)?.split_once(':')?;
    if version.parse::<u64>().ok()? != catalog.version {
        return None;
    }
    let offset = offset.parse::<usize>().ok()?;
    (offset < catalog.tools.len()).then_some(offset)
}

/// The scenario's tools: those it lists, then `generate_tools` generated ones.
pub fn scenario_tools(scenario: &Scenario) -> Vec<Value> {
    let mut tools = scenario.tools.clone().unwrap_or_default();
    let properties = scenario.generated_tool_properties.unwrap_or(8);
    tools.extend(
        (0..scenario.generate_tools.unwrap_or(0)).map(|index| generated_tool(index, properties)),
    );
    let schema_bytes = scenario.huge_tool_schema_bytes.unwrap_or(1 << 20);
    tools.extend((0..scenario.huge_tools.unwrap_or(0)).map(|index| huge_tool(index, schema_bytes)));
    tools
}

/// Hostile tool `index`: a small description, and an input schema of about `schema_bytes` of
/// described properties (many objects, as a real oversized schema has, each about 1 kB).
fn huge_tool(index: usize, schema_bytes: usize) -> Value {
    let description = "A property of a huge tool. ".repeat(38);
    let mut properties = serde_json::Map::new();
    let mut bytes = 0;
    while bytes < schema_bytes {
        let name = format!("property_{:07}", properties.len());
        bytes += name.len() + description.len() + 40;
        properties.insert(
            name,
            json!({"type": "string", "description": description.clone()}),
        );
    }
    json!({
        "name": format!("huge_{index}"),
        "description": format!("A hostile tool with a huge input schema, number {index}."),
        "inputSchema": {"type": "object", "properties": properties},
    })
}

/// Generated tool `index`, with `properties` described input properties. Words for searches:
/// `records` in every description, `marker{index:06}` in one tool's only, and `latitude` in
/// the first property's description of every hundredth tool.
pub fn generated_tool(index: usize, properties: usize) -> Value {
    let mut schema_properties = serde_json::Map::new();
    for property in 0..properties {
        let word = match (property, index % 100) {
            (0, 0) => "latitude",
            _ => "value",
        };
        schema_properties.insert(
            format!("field_{property:02}"),
            json!({
                "type": "string",
                "maxLength": 256,
                "description": format!(
                    "The {word} of field {property} for lookup {index}: plain text, trimmed and \
                     normalised before use, compared without regard to case or accents."
                ),
            }),
        );
    }
    json!({
        "name": format!("tool_{index:06}"),
        "title": format!("Tool {index}"),
        "description": format!(
            "Looks up records in section {} of the synthetic catalog; marker{index:06}.",
            index % 97
        ),
        "inputSchema": {
            "type": "object",
            "properties": schema_properties,
            "required": ["field_00"],
        },
        "annotations": {"readOnlyHint": true},
    })
}

/// `prompts/list`: every prompt in one page.
pub fn list_prompts(catalog: &Catalog) -> Value {
    json!({ "prompts": catalog.prompts })
}

/// The capabilities the scenario's tools and prompts add to `capabilities`.
pub fn declare(catalog: &Catalog, capabilities: &mut Value) {
    if catalog.tools_declared {
        capabilities["tools"] = json!({"listChanged": true});
    }
    if catalog.prompts_declared {
        capabilities["prompts"] = json!({"listChanged": true});
    }
}

/// The entry notifications a change from `old` to `new` calls for, and whether the resource
/// catalog (or anything else) changed too: a change that touched only tools or prompts sends
/// only their notifications.
pub fn notifications_for(old: &Catalog, new: &Catalog) -> (Vec<&'static str>, bool) {
    let mut methods = Vec::new();
    if old.tools != new.tools {
        methods.push("notifications/tools/list_changed");
    }
    if old.prompts != new.prompts {
        methods.push("notifications/prompts/list_changed");
    }
    let resources_changed = old.resources != new.resources || old.templates != new.templates;
    let resources_notify = resources_changed || methods.is_empty();
    (methods, resources_notify)
}

/// A notification message, tagged with the listen request's id when it goes on a listen.
pub fn notification(method: &str, subscription: Option<&Value>) -> String {
    let mut message = json!({"jsonrpc": "2.0", "method": method});
    if let Some(subscription) = subscription {
        message["params"] = json!({"_meta": {crate::rpc::SUBSCRIPTION_ID: subscription}});
    }
    message.to_string()
}

/// The `subscriptions/listen` key that asks for `method`.
fn listen_key(method: &str) -> &'static str {
    if method.contains("/tools/") {
        "toolsListChanged"
    } else {
        "promptsListChanged"
    }
}

/// Adds to a listen's acknowledgement the entry list changes it asked for that are declared.
pub fn honour(catalog: &Catalog, requested: &Value, honoured: &mut Value) {
    for (declared, key) in [
        (catalog.tools_declared, "toolsListChanged"),
        (catalog.prompts_declared, "promptsListChanged"),
    ] {
        if declared && requested.get(key) == Some(&json!(true)) {
            honoured[key] = json!(true);
        }
    }
}

/// Whether a listen that was acknowledged with `honoured` gets `method`.
pub fn listen_wants(honoured: &Value, method: &str) -> bool {
    honoured.get(listen_key(method)) == Some(&json!(true))
}
