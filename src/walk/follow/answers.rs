//! The upstream's answers read while they are parsed: a `catalog/entries` answer keeps only the
//! entries of the keys asked (each as its own text), a feed page stops at the changes asked
//! for, so what an upstream sends beyond them costs no memory, however much it sends.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::protocol::{CacheScope, Kind};

/// The names of loading servers kept from one answer (a follower only needs to know there
/// are some, and shows these).
const MAX_LOADING_KEPT: usize = 64;

/// A `catalog/entries` answer as a follower keeps it.
#[derive(Debug, Default)]
pub(super) struct KeyedAnswer {
    pub instance: String,
    pub seq: i64,
    pub total: Option<u64>,
    /// The entries of asked keys, each once, as the upstream wrote them.
    pub entries: Vec<Box<RawValue>>,
    pub loading: Vec<String>,
    /// The answer's `cacheScope` hint, read as a walk reads a page's.
    pub cache_scope: Option<CacheScope>,
}

/// Parses a `catalog/entries` answer of `kind`, keeping only the entries of `asked`.
pub(super) fn keyed_answer(
    text: &str,
    kind: Kind,
    asked: &BTreeSet<&str>,
) -> Result<KeyedAnswer, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let answer = KeyedAnswerSeed { kind, asked }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(answer)
}

/// The scope a `cacheScope` value declares: a string names it, anything else is `private`.
fn scope_of(hint: &RawValue) -> CacheScope {
    match serde_json::from_str::<Cow<'_, str>>(hint.get()) {
        Ok(scope) => CacheScope::of_page(Some(&scope)),
        Err(_) => CacheScope::Private,
    }
}

/// Reads the `cacheScope` of any answer without building the rest of it.
pub(super) fn scope_hint(text: &str) -> Option<CacheScope> {
    #[derive(Deserialize)]
    struct Hint<'a> {
        #[serde(borrow, default, rename = "cacheScope")]
        cache_scope: Option<&'a RawValue>,
    }
    let hint: Hint<'_> = serde_json::from_str(text).ok()?;
    hint.cache_scope.map(scope_of)
}

struct KeyedAnswerSeed<'k> {
    kind: Kind,
    asked: &'k BTreeSet<&'k str>,
}

impl<'de, 'k> DeserializeSeed<'de> for KeyedAnswerSeed<'k> {
    type Value = KeyedAnswer;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<KeyedAnswer, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, 'k> Visitor<'de> for KeyedAnswerSeed<'k> {
    type Value = KeyedAnswer;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a catalog/entries result")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyedAnswer, A::Error> {
        let mut answer = KeyedAnswer::default();
        let (mut instance, mut seq) = (None, None);
        let mut taken = BTreeSet::new();
        while let Some(field) = map.next_key::<Cow<'de, str>>()? {
            match field.as_ref() {
                "instance" => instance = Some(map.next_value::<String>()?),
                "seq" => seq = Some(map.next_value::<i64>()?),
                "total" => answer.total = map.next_value::<Option<u64>>()?,
                "entries" => map.next_value_seed(AskedEntries {
                    kind: self.kind,
                    asked: self.asked,
                    taken: &mut taken,
                    kept: &mut answer.entries,
                })?,
                "loading" => map.next_value_seed(FirstNames(&mut answer.loading))?,
                "cacheScope" => answer.cache_scope = Some(scope_of(map.next_value()?)),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        use serde::de::Error;
        answer.instance = instance.ok_or_else(|| A::Error::missing_field("instance"))?;
        answer.seq = seq.ok_or_else(|| A::Error::missing_field("seq"))?;
        Ok(answer)
    }
}

/// The `entries` array: each element looked at in place, kept (as its text) only when its key
/// was asked and not taken yet.
struct AskedEntries<'a, 'k> {
    kind: Kind,
    asked: &'k BTreeSet<&'k str>,
    taken: &'a mut BTreeSet<&'k str>,
    kept: &'a mut Vec<Box<RawValue>>,
}

impl<'de, 'a, 'k> DeserializeSeed<'de> for AskedEntries<'a, 'k> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, 'a, 'k> Visitor<'de> for AskedEntries<'a, 'k> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an array of entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut entries: A) -> Result<(), A::Error> {
        while let Some(entry) = entries.next_element::<&'de RawValue>()? {
            let Some(key) = entry_key(self.kind, entry) else {
                continue;
            };
            if let Some(asked) = self.asked.get(key.as_ref()) {
                if self.taken.insert(asked) {
                    self.kept.push(entry.to_owned());
                }
            }
        }
        Ok(())
    }
}

/// The key an entry of `kind` is asked by: a resource's URI, a template's URI template, a
/// tool's or prompt's key in the upstream's catalog; `None` for an entry without one.
fn entry_key<'de>(kind: Kind, entry: &'de RawValue) -> Option<Cow<'de, str>> {
    #[derive(Deserialize)]
    struct Keys<'a> {
        #[serde(borrow, default)]
        uri: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "uriTemplate")]
        uri_template: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "_meta")]
        meta: Option<KeyMeta<'a>>,
    }
    #[derive(Deserialize)]
    struct KeyMeta<'a> {
        #[serde(borrow, default, rename = "io.mcp-mirror/key")]
        key: Option<Cow<'a, str>>,
    }
    let keys: Keys<'de> = serde_json::from_str(entry.get()).ok()?;
    match kind {
        Kind::Resource => keys.uri,
        Kind::Template => keys.uri_template,
        Kind::Tool | Kind::Prompt => keys.meta?.key,
    }
}

/// A list of names of which the first `MAX_LOADING_KEPT` are kept, the rest only read.
struct FirstNames<'a>(&'a mut Vec<String>);

impl<'de, 'a> DeserializeSeed<'de> for FirstNames<'a> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, 'a> Visitor<'de> for FirstNames<'a> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an array of server names")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut names: A) -> Result<(), A::Error> {
        while let Some(name) = names.next_element::<Cow<'de, str>>()? {
            if self.0.len() < MAX_LOADING_KEPT {
                self.0.push(crate::redact::scrub_server_text(&name));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_asked_keys_are_kept_once_each() {
        let text = r#"{"instance": "db", "seq": 7, "total": 3, "cacheScope": "private",
            "entries": [{"uri": "a", "name": "1"}, {"uri": "x"}, 5, {"uri": "b"},
                        {"uri": "a", "name": "2"}, {"name": "no uri"}],
            "missing": ["c"], "loading": ["s1"], "extra": {"deep": [1, 2]}}"#;
        let asked: BTreeSet<&str> = ["a", "b", "c"].into_iter().collect();
        let answer = keyed_answer(text, Kind::Resource, &asked).expect("an answer");
        let kept: Vec<&str> = answer.entries.iter().map(|entry| entry.get()).collect();
        assert_eq!(kept, [r#"{"uri": "a", "name": "1"}"#, r#"{"uri": "b"}"#]);
        assert_eq!((answer.instance.as_str(), answer.seq), ("db", 7));
        assert_eq!(answer.total, Some(3));
        assert_eq!(answer.loading, ["s1"]);
        assert_eq!(answer.cache_scope, Some(CacheScope::Private));
    }

    #[test]
    fn tools_are_asked_by_their_key_upstream_and_templates_by_their_template() {
        let text = r#"{"instance": "db", "seq": 1, "entries": [
            {"name": "echo", "_meta": {"io.mcp-mirror/key": "demo/echo"}},
            {"name": "echo", "_meta": {"io.mcp-mirror/key": "other/echo"}}]}"#;
        let asked: BTreeSet<&str> = ["demo/echo"].into_iter().collect();
        let answer = keyed_answer(text, Kind::Tool, &asked).expect("an answer");
        assert_eq!(answer.entries.len(), 1);
        assert!(answer.entries[0].get().contains("demo/echo"));
        let text = r#"{"instance": "db", "seq": 1, "entries": [{"uriTemplate": "t/{id}"}]}"#;
        let asked: BTreeSet<&str> = ["t/{id}"].into_iter().collect();
        let answer = keyed_answer(text, Kind::Template, &asked).expect("an answer");
        assert_eq!(answer.entries.len(), 1);
        assert_eq!(answer.cache_scope, None);
    }

    #[test]
    fn an_answer_without_its_instance_is_refused() {
        let asked = BTreeSet::new();
        assert!(keyed_answer(r#"{"seq": 1, "entries": []}"#, Kind::Resource, &asked).is_err());
        assert_eq!(
            scope_hint(r#"{"cacheScope": {"odd": 1}}"#),
            Some(CacheScope::Private)
        );
        assert_eq!(
            scope_hint(r#"{"cacheScope": "public"}"#),
            Some(CacheScope::Public)
        );
    }
}
