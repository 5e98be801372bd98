//! The MCP objects: `Resource`, `ResourceTemplate`, `Definition`, read results, `StoredObject` and the `_meta` we add.

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::protocol::{CACHE_META_KEY, KEY_META_KEY, ORIGIN_META_KEY, VIA_META_KEY};

const META: &str = "_meta";

/// Why a `resources/read` result came from the content cache, and from when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheNote {
    pub stored_at_ms: i64,
    pub reason: String,
}

/// What the mirror adds to an object's `_meta`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MirrorMeta {
    /// `_meta["io.mcp-mirror/server"]`: the mirrored server the object comes from.
    pub origin: Option<String>,
    /// `_meta["io.mcp-mirror/cache"]`: set when a read was served from the content cache.
    pub cache: Option<CacheNote>,
    /// `_meta["io.mcp-mirror/via"]`: when the origin is another mirror's server, our name for
    /// that mirror (an entry of a mirror of mirrors: "demo via upstream").
    pub via: Option<String>,
    /// `_meta["io.mcp-mirror/key"]`: a tool's or prompt's key in the catalog that serves it,
    /// `<server>/<name>` (what a downstream mirror keeps it under).
    pub key: Option<String>,
}

impl MirrorMeta {
    /// Where an object comes from, for people: `demo`, or `demo via upstream` for an entry of
    /// a mirror of mirrors.
    pub fn attribution(&self) -> Option<String> {
        let origin = self.origin.as_deref()?;
        Some(match &self.via {
            Some(via) => format!("{origin} via {via}"),
            None => origin.to_string(),
        })
    }

    fn is_empty(&self) -> bool {
        self.origin.is_none() && self.cache.is_none() && self.via.is_none() && self.key.is_none()
    }

    /// Names the server an object was listed by. An object that already names its origin came
    /// from another mirror: it keeps that origin and `server` becomes the mirror it came via.
    fn attribute(&mut self, server: Option<&str>) {
        let Some(server) = server else {
            return;
        };
        match self.origin {
            Some(_) => self.via = Some(server.to_string()),
            None => self.origin = Some(server.to_string()),
        }
    }

    /// Takes our keys out of `object["_meta"]`; what does not have our shape stays put.
    fn take(object: &mut Map<String, Value>) -> MirrorMeta {
        let Some(Value::Object(meta)) = object.get_mut(META) else {
            return MirrorMeta::default();
        };
        MirrorMeta::take_from(meta)
    }

    /// Takes our keys out of a `_meta` object; what does not have our shape stays put.
    fn take_from(meta: &mut Map<String, Value>) -> MirrorMeta {
        MirrorMeta {
            origin: take_string(meta, ORIGIN_META_KEY),
            cache: take_typed(meta, CACHE_META_KEY),
            via: take_string(meta, VIA_META_KEY),
            key: take_string(meta, KEY_META_KEY),
        }
    }

    /// Writes `_meta`: the object's own (when it is an object; anything else is replaced,
    /// since our keys must be readable) with ours added.
    fn write<M: SerializeMap>(&self, map: &mut M, own: Option<&Value>) -> Result<(), M::Error> {
        if self.is_empty() {
            if let Some(own) = own {
                map.serialize_entry(META, own)?;
            }
            return Ok(());
        }
        let empty = Map::new();
        let own = match own {
            Some(Value::Object(own)) => own,
            _ => &empty,
        };
        map.serialize_entry(META, &MergedMeta { own, ours: self })
    }
}

struct MergedMeta<'a> {
    own: &'a Map<String, Value>,
    ours: &'a MirrorMeta,
}

impl Serialize for MergedMeta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.own {
            map.serialize_entry(key, value)?;
        }
        if let Some(origin) = &self.ours.origin {
            map.serialize_entry(ORIGIN_META_KEY, origin)?;
        }
        if let Some(cache) = &self.ours.cache {
            map.serialize_entry(CACHE_META_KEY, cache)?;
        }
        if let Some(via) = &self.ours.via {
            map.serialize_entry(VIA_META_KEY, via)?;
        }
        if let Some(key) = &self.ours.key {
            map.serialize_entry(KEY_META_KEY, key)?;
        }
        map.end()
    }
}

/// Removes `object[key]` when it is a string; anything else stays in the object.
fn take_string(object: &mut Map<String, Value>, key: &str) -> Option<String> {
    match object.get(key) {
        Some(Value::String(_)) => match object.remove(key) {
            Some(Value::String(text)) => Some(text),
            _ => None,
        },
        _ => None,
    }
}

/// Removes `object[key]` when it has `T`'s shape; anything else stays in the object.
fn take_typed<T: DeserializeOwned>(object: &mut Map<String, Value>, key: &str) -> Option<T> {
    let typed = T::deserialize(object.get(key)?).ok()?;
    object.remove(key);
    Some(typed)
}

/// Writes the typed string fields that are set, then every other field as it came, then `_meta`.
fn write_object<S: Serializer>(
    serializer: S,
    strings: &[(&str, Option<&str>)],
    other: &Map<String, Value>,
    meta: &MirrorMeta,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(None)?;
    for (key, value) in strings {
        if let Some(value) = value {
            map.serialize_entry(key, value)?;
        }
    }
    for (key, value) in other {
        if key != META {
            map.serialize_entry(key, value)?;
        }
    }
    meta.write(&mut map, other.get(META))?;
    map.end()
}

/// The fields a resource and a template share.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListedFields {
    pub name: Option<String>,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub meta: MirrorMeta,
    /// Every other field, exactly as the server sent it.
    pub other: Map<String, Value>,
}

impl ListedFields {
    /// The URI flags the mirror set in `_meta` (`uri_flags`), as their texts; empty for an
    /// entry whose URI points at no local or private place.
    pub fn uri_flags(&self) -> Vec<String> {
        self.other
            .get(META)
            .and_then(|meta| meta.get(crate::protocol::uri_flags::URI_FLAGS_META_KEY))
            .and_then(Value::as_array)
            .map(|flags| {
                flags
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn take(mut object: Map<String, Value>) -> ListedFields {
        ListedFields {
            name: take_string(&mut object, "name"),
            title: take_string(&mut object, "title"),
            description: take_string(&mut object, "description"),
            mime_type: take_string(&mut object, "mimeType"),
            meta: MirrorMeta::take(&mut object),
            other: object,
        }
    }

    fn write<S: Serializer>(&self, serializer: S, key: (&str, &str)) -> Result<S::Ok, S::Error> {
        let strings = [
            (key.0, Some(key.1)),
            ("name", self.name.as_deref()),
            ("title", self.title.as_deref()),
            ("description", self.description.as_deref()),
            ("mimeType", self.mime_type.as_deref()),
        ];
        write_object(serializer, &strings, &self.other, &self.meta)
    }
}

/// Parses a stored (or received) object; `key` must be a string field of it.
fn listed_object(value: Value, key: &str) -> Result<(String, ListedFields), String> {
    let Value::Object(mut object) = value else {
        return Err(format!("expected an object with a string `{key}`"));
    };
    let Some(identity) = take_string(&mut object, key) else {
        return Err(format!("missing string field `{key}`"));
    };
    Ok((identity, ListedFields::take(object)))
}

/// A stored object (a resource or a template, as its server sent it) served straight from its
/// text: every field passes through as it was stored and only `_meta` is rebuilt, with the
/// origin named as `Resource::from_stored` names it. Paging the merged catalog writes a page
/// this way without building a tree per entry (issue 11: a page of 500 well under 1 ms).
#[derive(Debug, Clone, Copy)]
pub struct StoredObject<'a> {
    pub raw: &'a str,
    pub origin: Option<&'a str>,
}

impl Serialize for StoredObject<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        thread_local! {
            /// The spliced text of the entry being written: one buffer a thread, not one
            /// allocation an entry (a page of 500 made 500).
            static SPLICED: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        let Some(server) = self.origin else {
            return self.serialize_through_fields(serializer);
        };
        // The serializer comes back unused (`Err`) when the text is not spliced.
        let spliced = SPLICED.with(move |buffer| {
            let Ok(mut spliced) = buffer.try_borrow_mut() else {
                return Err(serializer);
            };
            spliced.clear();
            if spliced.capacity() > MAX_KEPT_SPLICE_BYTES {
                spliced.shrink_to(MAX_KEPT_SPLICE_BYTES);
            }
            match splice_with_origin(self.raw, server, &mut spliced) {
                true => Ok(Verbatim(&spliced).serialize(serializer)),
                false => Err(serializer),
            }
        });
        match spliced {
            Ok(written) => written,
            Err(serializer) => self.serialize_through_fields(serializer),
        }
    }
}

impl StoredObject<'_> {
    /// Writes the entry from its fields' texts: the way for any text `splice_with_origin`
    /// does not take, and what it must write the same bytes as.
    pub(super) fn serialize_through_fields<S: Serializer>(
        &self,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        // A server's own text may hold line breaks between tokens (a socket answer is one
        // line) or repeat a key: such an object is written compact, through a tree, once.
        let compact;
        let mut raw = self.raw;
        if raw.bytes().any(|byte| byte == b'\n' || byte == b'\r') {
            compact = serde_json::from_str::<Value>(raw)
                .map_err(S::Error::custom)?
                .to_string();
            raw = &compact;
        }
        let fields = match top_level_fields(raw) {
            Some(fields) => fields,
            None => {
                let tree = serde_json::from_str::<Value>(raw).map_err(S::Error::custom)?;
                if !tree.is_object() {
                    return Err(S::Error::custom("a stored entry is not a JSON object"));
                }
                return StoredObject {
                    raw: &tree.to_string(),
                    origin: self.origin,
                }
                .serialize(serializer);
            }
        };
        let mut map = serializer.serialize_map(Some(fields.len() + 1))?;
        let mut own_meta = None;
        for (key, value) in &fields {
            match key.as_ref() == META {
                true => own_meta = Some(*value),
                false => map.serialize_entry(key, value)?,
            }
        }
        match (self.origin, own_meta) {
            (None, Some(own)) => map.serialize_entry(META, own)?,
            (None, None) => {}
            (Some(server), own) => {
                // Usually the server's own `_meta` is an object without our keys: its fields
                // pass through as text and ours follows, no tree built.
                let own_fields = match own {
                    None => Some(Vec::new()),
                    Some(own) => top_level_fields(own.get()).filter(|fields| {
                        !fields.iter().any(|(key, _)| {
                            [ORIGIN_META_KEY, CACHE_META_KEY, VIA_META_KEY].contains(&key.as_ref())
                        })
                    }),
                };
                if let Some(own) = own_fields {
                    map.serialize_entry(META, &OwnMetaWithOrigin { own, server })?;
                    return map.end();
                }
                let mut own = match own.map(|own| serde_json::from_str::<Value>(own.get())) {
                    Some(Ok(Value::Object(own))) => own,
                    _ => Map::new(),
                };
                let mut ours = MirrorMeta::take_from(&mut own);
                ours.attribute(Some(server));
                map.serialize_entry(
                    META,
                    &MergedMeta {
                        own: &own,
                        ours: &ours,
                    },
                )?;
            }
        }
        map.end()
    }
}

/// The name under which serde_json's serializer writes a struct's one string field as JSON
/// text, verbatim: how its own `RawValue` serializes (and its `Value` serializer parses it).
/// `RawValue` itself can only be made from a text by parsing it again.
const SERDE_JSON_RAW_TOKEN: &str = "$serde_json::private::RawValue";

/// JSON text written as it is. Only for text this module made from a stored entry's text,
/// which was JSON when it was stored.
struct Verbatim<'a>(&'a str);

impl Serialize for Verbatim<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut raw = serializer.serialize_struct(SERDE_JSON_RAW_TOKEN, 1)?;
        raw.serialize_field(SERDE_JSON_RAW_TOKEN, self.0)?;
        raw.end()
    }
}

/// JSON text this process wrote (a serializer's output, or such outputs spliced together) as a
/// `RawValue`, taken as it is: copied once, not parsed again (`RawValue::from_string` would
/// parse a page of the catalog to check it).
pub fn written_json(text: &str) -> Box<RawValue> {
    // Writing a string verbatim into a string cannot fail.
    serde_json::value::to_raw_value(&Verbatim(text)).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// The most of a splice buffer a thread keeps between entries (an entry is bounded by
/// `max_entry_bytes`, but most are far smaller).
const MAX_KEPT_SPLICE_BYTES: usize = 64 << 10;

/// Most fields a stored object (and its `_meta`) may have for `splice_with_origin`; an object
/// with more is written through its fields.
const MAX_SPLICED_FIELDS: usize = 24;

/// The fields of a compact object as spans of its text: each from its key's opening quote to
/// its value's end, with where the value starts.
struct FieldSpans {
    spans: [(usize, usize, usize); MAX_SPLICED_FIELDS],
    len: usize,
}

impl FieldSpans {
    fn new() -> FieldSpans {
        FieldSpans {
            spans: [(0, 0, 0); MAX_SPLICED_FIELDS],
            len: 0,
        }
    }

    fn fields(&self) -> &[(usize, usize, usize)] {
        &self.spans[..self.len]
    }
}

/// A field's key, from its span in `text` (keys hold no escapes here).
fn span_key(text: &[u8], (start, value, _): (usize, usize, usize)) -> &[u8] {
    &text[start + 1..value - 2]
}

/// Appends a stored entry with `_meta["io.mcp-mirror/server"] = server` added to `out`, as
/// `StoredObject` writes it through its fields, byte for byte, when the entry's text lets that
/// be a splice: one line, no space between the tokens of its top level or of its `_meta`,
/// keys without escapes, each key once, and a `_meta` (when it has one) that is an object
/// without our keys. Such a text (every server that writes compact JSON, as most do) is then
/// copied in a few pieces, its `_meta` moved last with the origin added; no tree and no list
/// of fields is built. False (and `out` untouched) for any other text. The text must be JSON,
/// as every stored entry is: the scan finds its structure, it does not check numbers.
pub(super) fn splice_with_origin(raw: &str, server: &str, out: &mut String) -> bool {
    let text = raw.as_bytes();
    // Line breaks can only be between tokens (a JSON string holds none).
    if memchr::memchr2(b'\n', b'\r', text).is_some() {
        return false;
    }
    let mut fields = FieldSpans::new();
    if compact_object(text, 0, &mut fields) != Some(text.len()) {
        return false;
    }
    let meta = fields
        .fields()
        .iter()
        .position(|&field| span_key(text, field) == META.as_bytes());
    let own_meta = match meta {
        None => None,
        Some(index) => {
            let (_, value, field_end) = fields.fields()[index];
            let mut own = FieldSpans::new();
            let ours = [ORIGIN_META_KEY, CACHE_META_KEY, VIA_META_KEY];
            if compact_object(text, value, &mut own) != Some(field_end)
                || own.fields().iter().any(|&field| {
                    ours.iter()
                        .any(|ours| span_key(text, field) == ours.as_bytes())
                })
            {
                return false;
            }
            // The own fields' text, between its braces.
            Some(&raw[value + 1..field_end - 1])
        }
    };
    out.reserve(raw.len() + server.len() + ORIGIN_META_KEY.len() + 16);
    out.push('{');
    for (index, &(start, _, field_end)) in fields.fields().iter().enumerate() {
        if Some(index) != meta {
            out.push_str(&raw[start..field_end]);
            out.push(',');
        }
    }
    out.push_str("\"_meta\":{");
    if let Some(own) = own_meta.filter(|own| !own.is_empty()) {
        out.push_str(own);
        out.push(',');
    }
    out.push('"');
    out.push_str(ORIGIN_META_KEY);
    out.push_str("\":");
    push_json_string(out, server);
    out.push_str("}}");
    true
}

/// Appends `text` as a JSON string, escaped as serde_json escapes it.
fn push_json_string(out: &mut String, text: &str) {
    if text
        .bytes()
        .any(|byte| byte < 0x20 || byte == b'"' || byte == b'\\')
    {
        // A JSON string always serializes.
        out.push_str(&serde_json::to_string(text).unwrap_or_default());
        return;
    }
    out.push('"');
    out.push_str(text);
    out.push('"');
}

/// Reads the object starting at `text[at]` into `fields` when it is compact at its top level
/// (no space between its tokens), with keys free of escapes, each once, and at most
/// `MAX_SPLICED_FIELDS` of them; the index just past it.
fn compact_object(text: &[u8], mut at: usize, fields: &mut FieldSpans) -> Option<usize> {
    if text.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    if text.get(at) == Some(&b'}') {
        return Some(at + 1);
    }
    loop {
        let start = at;
        if text.get(at) != Some(&b'"') {
            return None;
        }
        let close = at + 1 + memchr::memchr2(b'"', b'\\', text.get(at + 1..)?)?;
        if text[close] != b'"' {
            // An escaped key is written unescaped through the fields: not spliced.
            return None;
        }
        at = close + 1;
        if text.get(at) != Some(&b':') {
            return None;
        }
        at += 1;
        let value = at;
        at = skip_value(text, at)?;
        let key = &text[start + 1..close];
        if fields.len == MAX_SPLICED_FIELDS
            || fields
                .fields()
                .iter()
                .any(|&field| span_key(text, field) == key)
        {
            return None;
        }
        fields.spans[fields.len] = (start, value, at);
        fields.len += 1;
        match text.get(at) {
            Some(b',') => at += 1,
            Some(b'}') => return Some(at + 1),
            _ => return None,
        }
    }
}

/// The index just past the JSON value starting at `text[at]` (a string, an object or array
/// taken whole, or a number or literal up to the next delimiter).
fn skip_value(text: &[u8], mut at: usize) -> Option<usize> {
    match *text.get(at)? {
        b'"' => skip_string(text, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            loop {
                match *text.get(at)? {
                    b'"' => {
                        at = skip_string(text, at)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        _ => {
            let length = text
                .get(at..)?
                .iter()
                .position(|&b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t'))?;
            (length > 0).then_some(at + length)
        }
    }
}

/// The index just past the JSON string whose opening quote is `text[at]`.
fn skip_string(text: &[u8], mut at: usize) -> Option<usize> {
    at += 1;
    loop {
        let next = at + memchr::memchr2(b'"', b'\\', text.get(at..)?)?;
        if text[next] == b'"' {
            return Some(next + 1);
        }
        at = next + 2;
    }
}

/// A stored `_meta` without our keys, its fields as their text, with the origin added.
struct OwnMetaWithOrigin<'a> {
    own: Vec<(std::borrow::Cow<'a, str>, &'a RawValue)>,
    server: &'a str,
}

impl Serialize for OwnMetaWithOrigin<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.own.len() + 1))?;
        for (key, value) in &self.own {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry(ORIGIN_META_KEY, self.server)?;
        map.end()
    }
}

/// The top-level fields of a JSON object, each value's text borrowed; `None` for anything
/// but an object whose keys are all different.
fn top_level_fields(raw: &str) -> Option<Vec<(std::borrow::Cow<'_, str>, &RawValue)>> {
    let fields: Vec<(std::borrow::Cow<'_, str>, &RawValue)> =
        serde_json::from_str::<FieldList<'_>>(raw).ok()?.0;
    let mut keys: Vec<&str> = fields.iter().map(|(key, _)| key.as_ref()).collect();
    keys.sort_unstable();
    let unique = keys.windows(2).all(|pair| pair[0] != pair[1]);
    unique.then_some(fields)
}

/// An object's fields in their order, values unparsed.
struct FieldList<'a>(Vec<(std::borrow::Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for FieldList<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = FieldList<'de>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    fields.push((key.0, map.next_value::<&'de RawValue>()?));
                }
                Ok(FieldList(fields))
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// A key, borrowed from the text unless it holds escapes.
struct Key<'a>(std::borrow::Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyText;
        impl<'de> serde::de::Visitor<'de> for KeyText {
            type Value = Key<'de>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Owned(text.to_string())))
            }
        }
        deserializer.deserialize_str(KeyText)
    }
}

/// A resource as the mirror serves it: the server's own object, every field kept, with its
/// origin server in `_meta["io.mcp-mirror/server"]` when it comes from the merged catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    pub uri: String,
    pub fields: ListedFields,
}

impl Resource {
    /// A snapshot row: the server's object as stored, from `origin`.
    pub fn from_stored(raw: &str, origin: Option<&str>) -> Result<Resource, serde_json::Error> {
        let mut resource: Resource = serde_json::from_str(raw)?;
        resource.fields.meta.attribute(origin);
        Ok(resource)
    }

    /// The server that lists it in the merged catalog.
    pub fn origin(&self) -> Option<&str> {
        self.fields.meta.origin.as_deref()
    }

    /// Where it comes from, for people: `demo`, or `demo via upstream` for an entry of a
    /// mirror of mirrors.
    pub fn attribution(&self) -> Option<String> {
        self.fields.meta.attribution()
    }

    /// Whether `server` is its origin or the mirror it came through.
    pub fn comes_from(&self, server: &str) -> bool {
        self.origin() == Some(server) || self.fields.meta.via.as_deref() == Some(server)
    }
}

impl Serialize for Resource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.fields.write(serializer, ("uri", &self.uri))
    }
}

impl<'de> Deserialize<'de> for Resource {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (uri, fields) = listed_object(Value::deserialize(deserializer)?, "uri")
            .map_err(|error| D::Error::custom(format!("resource: {error}")))?;
        Ok(Resource { uri, fields })
    }
}

/// A resource template as the mirror serves it, like `Resource`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceTemplate {
    pub uri_template: String,
    pub fields: ListedFields,
}

impl ResourceTemplate {
    pub fn from_stored(
        raw: &str,
        origin: Option<&str>,
    ) -> Result<ResourceTemplate, serde_json::Error> {
        let mut template: ResourceTemplate = serde_json::from_str(raw)?;
        template.fields.meta.attribute(origin);
        Ok(template)
    }
}

impl Serialize for ResourceTemplate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.fields
            .write(serializer, ("uriTemplate", &self.uri_template))
    }
}

impl<'de> Deserialize<'de> for ResourceTemplate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (uri_template, fields) =
            listed_object(Value::deserialize(deserializer)?, "uriTemplate")
                .map_err(|error| D::Error::custom(format!("resource template: {error}")))?;
        Ok(ResourceTemplate {
            uri_template,
            fields,
        })
    }
}

/// A tool (`tools/list`) or a prompt (`prompts/list`) as the mirror serves it, like
/// `Resource`: its `name` and the fields both kinds share typed, every other field (a tool's
/// `inputSchema` and `annotations`, a prompt's `arguments`) kept as the server sent it, our
/// notes in `_meta`. One type for both: the fields we read are the ones MCP's `Tool` and
/// `Prompt` share.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    pub name: String,
    pub fields: ListedFields,
}

/// A tool as the mirror serves it (`Definition`).
pub type Tool = Definition;
/// A prompt as the mirror serves it (`Definition`).
pub type Prompt = Definition;

impl Definition {
    /// A stored definition: the server's object as stored, from `origin`.
    pub fn from_stored(raw: &str, origin: Option<&str>) -> Result<Definition, serde_json::Error> {
        let mut definition: Definition = serde_json::from_str(raw)?;
        definition.fields.meta.attribute(origin);
        Ok(definition)
    }

    /// A stored definition as the mirror serves it: from `server`, keyed `<server>/<name>` in
    /// this catalog (`name`: the key within the server, which for an entry of an upstream
    /// mirror is itself qualified), whatever key an upstream gave it.
    pub fn served(raw: &str, server: &str, name: &str) -> Result<Definition, serde_json::Error> {
        let mut definition = Definition::from_stored(raw, Some(server))?;
        definition.fields.meta.key = Some(format!("{server}/{name}"));
        Ok(definition)
    }
}

impl Serialize for Definition {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.fields.write(serializer, ("name", &self.name))
    }
}

impl<'de> Deserialize<'de> for Definition {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (name, fields) = listed_object(Value::deserialize(deserializer)?, "name")
            .map_err(|error| D::Error::custom(format!("tool or prompt: {error}")))?;
        Ok(Definition { name, fields })
    }
}

/// One item of a read result's `contents`: text or a base64 blob.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceContents {
    pub uri: Option<String>,
    pub mime_type: Option<String>,
    pub text: Option<String>,
    pub blob: Option<String>,
    pub other: Map<String, Value>,
}

impl Serialize for ResourceContents {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let strings = [
            ("uri", self.uri.as_deref()),
            ("mimeType", self.mime_type.as_deref()),
            ("text", self.text.as_deref()),
            ("blob", self.blob.as_deref()),
        ];
        write_object(serializer, &strings, &self.other, &MirrorMeta::default())
    }
}

impl<'de> Deserialize<'de> for ResourceContents {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut object = Map::deserialize(deserializer)?;
        Ok(ResourceContents {
            uri: take_string(&mut object, "uri"),
            mime_type: take_string(&mut object, "mimeType"),
            text: take_string(&mut object, "text"),
            blob: take_string(&mut object, "blob"),
            other: object,
        })
    }
}

/// A `resources/read` result as the server sent it, with the mirror's notes in `_meta`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadResourceResult {
    pub contents: Vec<ResourceContents>,
    pub meta: MirrorMeta,
    /// Every other field, exactly as the server sent it.
    pub other: Map<String, Value>,
}

impl Serialize for ReadResourceResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("contents", &self.contents)?;
        for (key, value) in &self.other {
            if key != META {
                map.serialize_entry(key, value)?;
            }
        }
        self.meta.write(&mut map, self.other.get(META))?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for ReadResourceResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut object = Map::deserialize(deserializer)?;
        let contents = match object.remove("contents") {
            Some(contents) => Vec::<ResourceContents>::deserialize(contents)
                .map_err(|error| D::Error::custom(format!("`contents`: {error}")))?,
            None => return Err(D::Error::missing_field("contents")),
        };
        Ok(ReadResourceResult {
            contents,
            meta: MirrorMeta::take(&mut object),
            other: object,
        })
    }
}
