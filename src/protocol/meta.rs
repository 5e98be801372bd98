//! Our `_meta` keys and the chain of mirrors an entry came through (this mirror's instance id,
//! `came_through_us`, `through_mirror`), and the feed capability a mirror offers.

/// The `_meta` key that names a resource's origin server.
pub const ORIGIN_META_KEY: &str = "io.mcp-mirror/server";

/// A search hit's `_meta`: `{"io.mcp-mirror/server": server}`, as on listed resources.
pub fn origin_meta(server: &str) -> serde_json::Value {
    let mut meta = serde_json::Map::new();
    meta.insert(ORIGIN_META_KEY.into(), server.into());
    serde_json::Value::Object(meta)
}

/// The `_meta` key naming the mirror an entry came through, when its origin is another
/// mirror's server ("demo via upstream").
pub const VIA_META_KEY: &str = "io.mcp-mirror/via";
/// The `_meta` key listing the instance ids of the mirrors an entry passed through, the
/// nearest to its origin first; a mirror appends its upstream's id as it takes the entry.
pub const MIRRORS_META_KEY: &str = "io.mcp-mirror/mirrors";
/// The longest `io.mcp-mirror/mirrors` chain a mirror takes from an upstream; a longer one is
/// left out like a loop (a tree of mirrors deeper than this is a mistake or an attack).
pub const MAX_MIRROR_HOPS: usize = 16;

static MIRROR_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets this process's mirror instance id (from its database); the first one set stays.
pub fn set_mirror_id(id: &str) {
    let _ = MIRROR_ID.set(id.to_string());
}

/// This mirror's instance id, once its database is open.
pub fn mirror_id() -> Option<&'static str> {
    MIRROR_ID.get().map(String::as_str)
}

/// Whether a listed entry (its JSON text) came through this mirror already, or through more
/// mirrors than `MAX_MIRROR_HOPS`: a mirror never takes back its own entries from an upstream.
pub fn came_through_us(entry: &str) -> bool {
    if !entry.contains(MIRRORS_META_KEY) {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "io.mcp-mirror/mirrors")]
        mirrors: Option<Vec<serde_json::Value>>,
    }
    let Ok(Entry {
        meta: Some(Meta {
            mirrors: Some(mirrors),
        }),
    }) = serde_json::from_str::<Entry>(entry)
    else {
        return false;
    };
    mirrors.len() >= MAX_MIRROR_HOPS
        || mirror_id().is_some_and(|us| mirrors.iter().any(|mirror| mirror.as_str() == Some(us)))
}

/// The `serverInfo` key where a mirror names its instance id, so that a downstream can
/// record it in the chain of each entry it takes (`MIRRORS_META_KEY`).
pub const INSTANCE_INFO_KEY: &str = "io.mcp-mirror/instance";

/// An entry taken from the upstream mirror `upstream` (its instance id), with `upstream`
/// appended to its chain of mirrors; `None` when it does not parse as an object.
pub fn through_mirror(entry: &str, upstream: &str) -> Option<Box<serde_json::value::RawValue>> {
    let mut value: serde_json::Value = serde_json::from_str(entry).ok()?;
    let object = value.as_object_mut()?;
    let meta = object
        .entry("_meta")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    if !meta.is_object() {
        *meta = serde_json::Value::Object(Default::default());
    }
    let chain = meta
        .as_object_mut()?
        .entry(MIRRORS_META_KEY)
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if !chain.is_array() {
        *chain = serde_json::Value::Array(Vec::new());
    }
    chain.as_array_mut()?.push(upstream.into());
    serde_json::value::to_raw_value(&value).ok()
}

/// The `_meta` key on a `resources/read` result served from the content cache.
pub const CACHE_META_KEY: &str = "io.mcp-mirror/cache";
/// The `_meta` key (`true`) on an entry stored trimmed because it was over `max_entry_bytes`.
pub const OVERSIZED_META_KEY: &str = "io.mcp-mirror/oversized";

/// The capability (under `experimental`) by which an mcp-mirror says a downstream mirror may
/// follow its change feed, and the version of that contract.
pub const FEED_CAPABILITY: &str = "io.mcp-mirror/feed";
/// Version 2: the feed and `catalog/entries` carry every kind (tools and prompts keyed
/// `<server>/<name>`, `KEY_META_KEY`), and the face notifies tool and prompt changes too.
pub const FEED_VERSION: u64 = 2;

/// The `_meta` key on a tool or prompt a mirror serves (`catalog/tools`, `catalog/prompts`,
/// `catalog/entries`): its key in that mirror's catalog, `<server>/<name>` (`name` being the
/// key within the server: a mirrored entry's is itself qualified, so the path chains through
/// each level). A downstream mirror keeps the entry under this key, since one name may be
/// listed by several servers of its upstream.
pub const KEY_META_KEY: &str = "io.mcp-mirror/key";
