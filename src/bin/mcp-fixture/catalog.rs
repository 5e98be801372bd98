//! The scenario file format and the immutable catalog a scenario describes: pages, cursors, faults.

use std::collections::HashMap;

use anyhow::bail;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::Args;

const CURSOR_PREFIX: &str = "mcp-fixture-cursor:";
const MIME_TYPES: [&str; 3] = ["text/markdown", "text/plain", "application/json"];
const BASE64_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A scenario file as written by a test; every field is optional.
///
/// The counters (`expire_sessions`, `drop_streams`, `close_listens`,
/// `cancel_listens`) are controls, not catalog content: a change of their value
/// triggers their action once and does not count as a catalog change.
#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    pub generate: Option<usize>,
    pub prefix: Option<String>,
    /// The `prefix` goes only on every Nth generated resource (index % N == 0): a new prefix
    /// then changes that share of the catalog (10 changes a tenth).
    pub prefix_every: Option<usize>,
    pub resources: Vec<Value>,
    pub templates: Option<Vec<Value>>,
    pub page_size: Option<usize>,
    pub capabilities_resources: Option<bool>,
    /// Tools served by `tools/list` (declared when present), `tools_page_size` per page.
    pub tools: Option<Vec<Value>>,
    pub tools_page_size: Option<usize>,
    /// This many generated tools (`tool_000000`, …) after `tools`, for large catalogs.
    pub generate_tools: Option<usize>,
    /// Described input properties per generated tool (8 unless set): the schema's size.
    pub generated_tool_properties: Option<usize>,
    /// Hostile: this many tools (`huge_0`, …) after the others, each with an `inputSchema` of
    /// about `huge_tool_schema_bytes` (described properties); serve them one per page.
    pub huge_tools: Option<usize>,
    pub huge_tool_schema_bytes: Option<usize>,
    /// Prompts served by `prompts/list` (declared when present).
    pub prompts: Option<Vec<Value>>,
    /// Every `tools/list` first page revises the tools: each description ends with the number
    /// of first pages served so far, so every walk sees a new version of every tool.
    pub revise_tools_per_list: bool,
    /// Every catalog change sends this many `list_changed` notifications back to back.
    pub notify_burst: Option<usize>,
    /// The `cacheScope` of every `resources/list` page (else `--cache-scope`): a scenario
    /// reload that turns a server's entries private without changing them.
    pub cache_scope: Option<String>,
    /// Hostile: one more resource (`fixture://NAME/huge`) whose description is this many bytes.
    pub huge_description_bytes: Option<usize>,
    /// Whenever this value changes, every HTTP session becomes unknown (404) and its streams close.
    pub expire_sessions: u64,
    /// Whenever this value changes, every GET, listen and legacy SSE stream is cut abruptly.
    pub drop_streams: u64,
    /// Whenever this value changes, every listen ends gracefully with its result.
    pub close_listens: u64,
    /// Whenever this value changes, every stdio listen ends with `notifications/cancelled`
    /// (HTTP listens end with their result, the only graceful close HTTP has).
    pub cancel_listens: u64,
    pub faults: Faults,
}

/// The one-shot actions a scenario reload asks for, found by comparing counters.
#[derive(Default, Debug)]
pub struct Controls {
    pub expire_sessions: bool,
    pub drop_streams: bool,
    pub close_listens: bool,
    pub cancel_listens: bool,
}

impl Scenario {
    /// The scenario without its control counters: what decides whether the catalog changed.
    pub fn content(&self) -> Scenario {
        Scenario {
            expire_sessions: 0,
            drop_streams: 0,
            close_listens: 0,
            cancel_listens: 0,
            ..self.clone()
        }
    }

    /// Which control counters differ between `previous` and this scenario.
    pub fn controls_since(&self, previous: &Scenario) -> Controls {
        Controls {
            expire_sessions: self.expire_sessions != previous.expire_sessions,
            drop_streams: self.drop_streams != previous.drop_streams,
            close_listens: self.close_listens != previous.close_listens,
            cancel_listens: self.cancel_listens != previous.cancel_listens,
        }
    }
}

/// Misbehaviours a scenario can switch on to exercise a client's error paths.
///
/// Page faults name a 1-based page of `resources/list` and fire on every walk
/// that reaches that page while they are set.
#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    pub fail_at_page: Option<usize>,
    /// The request for this page is never answered (the server sleeps on it for an hour).
    pub stall_at_page: Option<usize>,
    pub loop_cursor: bool,
    pub stale_cursor_once: bool,
    pub duplicate_every: Option<usize>,
    pub page_delay_ms: Option<u64>,
    /// Every `tools/list` page waits this long before it is answered (a walk's tools come
    /// well after its resources).
    pub tools_page_delay_ms: Option<u64>,
    pub empty_string_cursor: bool,
    pub exit_at_page: Option<usize>,
    /// HTTP: cut the connection part way through the response; stdio: exit the process.
    pub drop_at_page: Option<usize>,
    /// HTTP: answer 500 with a short text body; stdio: a -32603 error (stdio has no status).
    pub http_500_at_page: Option<usize>,
    /// HTTP: 200 with a body that is not JSON; stdio: a line that is not JSON.
    pub garbage_at_page: Option<usize>,
    /// Answer every method the server does not know (in the era of the request) with a bare
    /// `{}` result, as some real servers do; with `--era legacy` that includes `server/discover`.
    pub bare_result_for_unknown_methods: bool,
    /// The first N `server/discover` requests of the process answer -32022, listing the
    /// server's versions in `data.supported`, even when the requested one is among them.
    pub refuse_discovers: Option<u64>,
    /// stdio: requests for these methods are read and never answered.
    pub unanswered_methods: Vec<String>,
    /// GET streams end cleanly right after their first event (which carries `retry:`).
    pub end_get_streams: bool,
    /// Listens end gracefully (with their result) right after their acknowledgement.
    pub end_listens: bool,
    /// The first N GET / POST requests of the process answer 503 (with `Retry-After:
    /// retry_after_secs` when that is set).
    pub unavailable_gets: Option<u64>,
    pub unavailable_posts: Option<u64>,
    pub retry_after_secs: Option<u64>,
    /// Every request answered also sends `notifications/resources/list_changed` on every
    /// channel that carries them (as `notify_burst` 1 would), though nothing changed.
    pub notify_with_every_answer: bool,
    /// Modern era: requests (other than `server/discover`) whose clientCapabilities lack
    /// this key fail with -32021 MissingRequiredClientCapability.
    pub require_client_capability: Option<String>,
}

/// How a page fault replaces the answer; each transport renders it its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageFault {
    Drop,
    Http500,
    Garbage,
}

/// One immutable version of the served catalog; a scenario change swaps in a new one.
pub struct Catalog {
    pub version: u64,
    pub resources: Resources,
    pub templates: Vec<Value>,
    pub page_size: usize,
    pub resources_capability: bool,
    pub tools: Vec<Value>,
    pub tools_declared: bool,
    pub tools_page_size: usize,
    /// `revise_tools_per_list`: the first pages of `tools/list` served so far, when set.
    pub tool_revisions: Option<std::sync::atomic::AtomicU64>,
    pub prompts: Vec<Value>,
    pub prompts_declared: bool,
    pub notify_burst: usize,
    pub cache_scope: Option<String>,
    pub faults: Faults,
}

impl Catalog {
    /// Builds a catalog from the command line settings overlaid with a scenario.
    ///
    /// `endpoint` is set when the process serves several endpoints; generated
    /// URIs then carry the endpoint index so that catalogs do not collide.
    pub fn build(
        args: &Args,
        scenario: &Scenario,
        version: u64,
        endpoint: Option<usize>,
    ) -> anyhow::Result<Self> {
        let page_size = scenario.page_size.unwrap_or(args.page_size);
        if page_size == 0 {
            bail!("page_size must be at least 1");
        }
        let mut listed = Vec::new();
        if let Some(bytes) = scenario.huge_description_bytes {
            listed.push(json!({
                "uri": format!("fixture://{}/huge", args.name),
                "name": "huge",
                "description": "x".repeat(bytes),
            }));
        }
        listed.extend(scenario.resources.iter().cloned());
        let resources = Resources::new(
            &args.name,
            endpoint,
            scenario.generate.unwrap_or(args.generate),
            scenario
                .prefix
                .clone()
                .map(|prefix| (prefix, scenario.prefix_every.unwrap_or(1).max(1))),
            listed,
        )?;
        let templates = match &scenario.templates {
            Some(templates) => templates.clone(),
            None => default_templates(&args.name),
        };
        Ok(Self {
            version,
            resources,
            templates,
            page_size,
            resources_capability: scenario.capabilities_resources.unwrap_or(true),
            tools: crate::definitions::scenario_tools(scenario),
            tools_declared: scenario.tools.is_some()
                || scenario.generate_tools.is_some()
                || scenario.huge_tools.is_some(),
            tools_page_size: scenario.tools_page_size.unwrap_or(100).max(1),
            tool_revisions: scenario
                .revise_tools_per_list
                .then(|| std::sync::atomic::AtomicU64::new(0)),
            prompts: scenario.prompts.clone().unwrap_or_default(),
            prompts_declared: scenario.prompts.is_some(),
            notify_burst: scenario.notify_burst.unwrap_or(1).max(1),
            cache_scope: scenario.cache_scope.clone(),
            faults: scenario.faults.clone(),
        })
    }

    pub fn encode_cursor(&self, offset: usize) -> String {
        if offset == self.page_size && self.faults.empty_string_cursor {
            return String::new();
        }
        base64_encode(format!("{CURSOR_PREFIX}{}:{offset}", self.version).as_bytes())
    }

    /// Turns a cursor back into an offset, or `None` when it is malformed or from another version.
    pub fn decode_cursor(&self, cursor: &str) -> Option<usize> {
        let offset = if cursor.is_empty() {
            if !self.faults.empty_string_cursor {
                return None;
            }
            self.page_size
        } else {
            let text = String::from_utf8(base64_decode(cursor)?).ok()?;
            let (version, offset) = text.strip_prefix(CURSOR_PREFIX)?.split_once(':')?;
            if version.parse::<u64>().ok()? != self.version {
                return None;
            }
            offset.parse::<usize>().ok()?
        };
        let in_range = offset % self.page_size == 0 && offset < self.resources.len();
        (in_range || self.faults.loop_cursor).then_some(offset)
    }

    /// The fault, if any, that replaces the answer for 1-based page `page_number`.
    pub fn page_fault(&self, page_number: usize) -> Option<PageFault> {
        let faults = &self.faults;
        if faults.drop_at_page == Some(page_number) {
            Some(PageFault::Drop)
        } else if faults.http_500_at_page == Some(page_number) {
            Some(PageFault::Http500)
        } else if faults.garbage_at_page == Some(page_number) {
            Some(PageFault::Garbage)
        } else {
            None
        }
    }

    /// Whether the `duplicate_every` fault lists the resource at `position` twice.
    fn is_duplicated(&self, position: usize) -> bool {
        let every = self.faults.duplicate_every.unwrap_or(0);
        every > 0 && (position + 1) % every == 0
    }

    /// Builds the `resources/list` result for the page that starts at `offset`.
    pub fn page(&self, offset: usize) -> Value {
        let total = self.resources.len();
        let start = if self.faults.loop_cursor { 0 } else { offset };
        let end = (start + self.page_size).min(total);
        let next_offset = if self.faults.loop_cursor {
            Some(self.page_size)
        } else {
            (end < total).then_some(end)
        };
        // A duplicated resource is repeated at the top of the following page, or
        // at the end of its own page when there is no following page.
        let duplicated = |position: &usize| self.is_duplicated(*position);
        let mut items: Vec<Value> = Vec::new();
        if start > 0 {
            let previous = start.saturating_sub(self.page_size)..start;
            items.extend(previous.filter(duplicated).map(|i| self.resources.get(i)));
        }
        items.extend((start..end).map(|i| self.resources.get(i)));
        if next_offset.is_none() {
            items.extend(
                (start..end)
                    .filter(duplicated)
                    .map(|i| self.resources.get(i)),
            );
        }
        let mut result = json!({ "resources": items });
        if let Some(next_offset) = next_offset {
            result["nextCursor"] = Value::String(self.encode_cursor(next_offset));
        }
        result
    }
}

/// A catalog's resources: the generated ones made on demand from their number (a catalog of
/// 1,000,000 held as JSON trees took gigabytes, twice while the next version was built), then
/// the scenario's own. Equal when they list the same resources.
#[derive(Debug, Clone, PartialEq)]
pub struct Resources {
    name: String,
    endpoint: Option<usize>,
    generated: usize,
    /// The prefix of every `n`th generated resource (`prefix_every`, 1: every one).
    prefix: Option<(String, usize)>,
    listed: Vec<Value>,
    /// Each listed URI's first position among `listed`.
    listed_by_uri: HashMap<String, usize>,
}

impl Resources {
    fn new(
        name: &str,
        endpoint: Option<usize>,
        generated: usize,
        prefix: Option<(String, usize)>,
        listed: Vec<Value>,
    ) -> anyhow::Result<Resources> {
        let mut listed_by_uri = HashMap::new();
        for (position, resource) in listed.iter().enumerate() {
            let Some(uri) = resource.get("uri").and_then(Value::as_str) else {
                bail!("resource {} has no string \"uri\"", generated + position);
            };
            listed_by_uri.entry(uri.to_owned()).or_insert(position);
        }
        Ok(Resources {
            name: name.to_string(),
            endpoint,
            generated,
            prefix,
            listed,
            listed_by_uri,
        })
    }

    pub fn len(&self) -> usize {
        self.generated + self.listed.len()
    }

    /// The resource at `position` (below `len`).
    pub fn get(&self, position: usize) -> Value {
        match position.checked_sub(self.generated) {
            None => {
                let prefix = self
                    .prefix
                    .as_ref()
                    .filter(|(_, every)| position % every == 0)
                    .map(|(prefix, _)| prefix.as_str());
                generated_resource(&self.name, self.endpoint, position, prefix)
            }
            Some(listed) => self.listed[listed].clone(),
        }
    }

    /// The first position listing `uri`.
    pub fn position(&self, uri: &str) -> Option<usize> {
        self.generated_position(uri).or_else(|| {
            self.listed_by_uri
                .get(uri)
                .map(|position| self.generated + position)
        })
    }

    /// The number of the generated resource whose URI is `uri`.
    fn generated_position(&self, uri: &str) -> Option<usize> {
        let number = uri
            .strip_prefix(&generated_uri_start(&self.name, self.endpoint))?
            .strip_suffix(".md")?;
        let index: usize = number.parse().ok()?;
        (index < self.generated && format!("{index:06}") == number).then_some(index)
    }
}

/// What every generated resource's URI starts with; then its number, six digits at least, and
/// `.md`.
fn generated_uri_start(name: &str, endpoint: Option<usize>) -> String {
    let endpoint_segment = endpoint
        .map(|endpoint| format!("{endpoint}/"))
        .unwrap_or_default();
    format!("fixture://{name}/{endpoint_segment}docs/")
}

/// Synthesizes resource `index`, filling in every optional Resource field.
fn generated_resource(
    name: &str,
    endpoint: Option<usize>,
    index: usize,
    prefix: Option<&str>,
) -> Value {
    let suffix = prefix
        .map(|prefix| format!(" {prefix}"))
        .unwrap_or_default();
    let topic = index % 37;
    let audience = if index % 2 == 0 { "user" } else { "assistant" };
    json!({
        "uri": format!("{}{index:06}.md", generated_uri_start(name, endpoint)),
        "name": format!("doc-{index:06}"),
        "title": format!("Document {index}{suffix}"),
        "description": format!("Synthetic document number {index} about topic-{topic}{suffix}"),
        "mimeType": MIME_TYPES[index % MIME_TYPES.len()],
        "size": 1000 + index,
        "annotations": {
            "audience": [audience],
            "priority": (index % 10) as f64 / 10.0,
            "lastModified": "2026-01-01T00:00:00Z",
        },
        "icons": [
            {"src": "https://example.invalid/icon.png", "mimeType": "image/png", "sizes": ["16x16"]}
        ],
        "_meta": {"fixture/index": index},
    })
}

fn default_templates(server: &str) -> Vec<Value> {
    let template = |path: &str, name: &str, title: &str, mime_type: &str| {
        json!({
            "uriTemplate": format!("fixture://{server}/{path}"),
            "name": name,
            "title": title,
            "description": format!("{title} in the synthetic catalog"),
            "mimeType": mime_type,
        })
    };
    vec![
        template(
            "docs/{id}.md",
            "doc-by-id",
            "Document by id",
            "text/markdown",
        ),
        template(
            "topics/{topic}",
            "docs-by-topic",
            "Documents by topic",
            "application/json",
        ),
        template(
            "search{?q,limit}",
            "search",
            "Search documents",
            "application/json",
        ),
    ]
}

/// Standard base64 with padding, enough for blobs and cursors without another dependency.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut encoded = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let byte_at = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let group = (byte_at(0) << 16) | (byte_at(1) << 8) | byte_at(2);
        for sextet in 0..4 {
            if sextet <= chunk.len() {
                let value = (group >> (18 - 6 * sextet)) & 63;
                encoded.push(char::from(BASE64_ALPHABET[value as usize]));
            } else {
                encoded.push('=');
            }
        }
    }
    encoded
}

/// Decodes canonical standard base64; anything that would not re-encode identically is rejected.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    if text.len() % 4 != 0 {
        return None;
    }
    let mut decoded = Vec::with_capacity(text.len() / 4 * 3);
    for chunk in text.as_bytes().chunks(4) {
        let padding = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        let mut group = 0u32;
        for &c in &chunk[..4 - padding] {
            let value = BASE64_ALPHABET.iter().position(|&a| a == c)?;
            group = (group << 6) | value as u32;
        }
        group <<= 6 * padding;
        let bytes = [(group >> 16) as u8, (group >> 8) as u8, group as u8];
        decoded.extend_from_slice(bytes.get(..3usize.checked_sub(padding)?)?);
    }
    (base64_encode(&decoded) == text).then_some(decoded)
}
