//! Resources, templates, tools and prompts: every field kept, our `_meta` added, both directions.

use serde_json::json;
use serde_json::Value;

use super::objects::splice_with_origin;
use super::*;

/// Written from its text, an entry is the same JSON as the typed `Resource` writes: for
/// every shape of `_meta` (none, theirs, ours from an upstream mirror, not an object), line
/// breaks between tokens, escaped keys and repeated keys.
#[test]
fn stored_objects_write_what_resources_write() {
    let raws = [
        r#"{"uri":"file:///a","name":"a","size":3}"#.to_string(),
        r#"{"uri":"file:///a","_meta":{"theirs":true},"annotations":{"audience":["user"]}}"#
            .to_string(),
        r#"{"uri":"file:///a","_meta":{"io.mcp-mirror/server":"demo","x":1}}"#.to_string(),
        r#"{"uri":"file:///a","_meta":{"io.mcp-mirror/server":"demo","io.mcp-mirror/via":"old"}}"#
            .to_string(),
        r#"{"uri":"file:///a","_meta":"not an object","name":7}"#.to_string(),
        "{\n  \"uri\": \"file:///a\",\r\n  \"description\": \"two\\nlines\"\n}".to_string(),
        r#"{"uri":"file:///a","na\u006de":"escaped key","extra":null}"#.to_string(),
        r#"{"uri":"file:///a","name":"first","name":"second"}"#.to_string(),
        r#"{"uri":"file:///a","_meta":{}}"#.to_string(),
        r#"{"uri":"file:///a","_meta":{"z":{"b":[1,{"c":null}]},"a":"y","m":2.5}}"#.to_string(),
        r#"{"uri":"file:///a","_meta":{"dup":1,"dup":2}}"#.to_string(),
        r#"{"uri":"file:///a","_meta":{"io.mcp-mirror/ser\u0076er":"demo","x":1}}"#.to_string(),
        r#"{"uri":"file:///a","_meta":{"io.mcp-mirror/cache":5,"x":1}}"#.to_string(),
        r#"{"uri":"file:///a","_meta":{"io.mcp-mirror/via":"v"}}"#.to_string(),
        r#"{"uri":"file:///a","_meta":{"k\"ey":"quoted"}}"#.to_string(),
    ];
    for raw in &raws {
        for origin in [None, Some("docs")] {
            let typed = serde_json::to_value(Resource::from_stored(raw, origin).expect("parse"))
                .expect("typed");
            let text = serde_json::to_string(&StoredObject { raw, origin }).expect("stored");
            assert!(!text.contains('\n'), "one line: {text}");
            let stored: Value = serde_json::from_str(&text).expect("valid JSON");
            assert_eq!(stored, typed, "{raw} from {origin:?}");
        }
    }
    let not_an_object = StoredObject {
        raw: "[1,2]",
        origin: Some("docs"),
    };
    assert!(serde_json::to_string(&not_an_object).is_err());
}

/// A tool or prompt keeps every field it was listed with (schemas, arguments, its own
/// `_meta`), gains its origin (or, from another mirror, the mirror it came via), and reads
/// back to the same value: the daemon serializes it, the CLI deserializes it.
#[test]
fn tools_and_prompts_keep_every_field_with_their_origin() {
    let tool = json!({
        "name": "add", "title": "Add", "description": "Adds", "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": true}, "_meta": {"theirs": 1}, "extra": null
    });
    let served = Definition::from_stored(&tool.to_string(), Some("calc")).expect("parse");
    assert_eq!(served.name, "add");
    assert_eq!(served.fields.description.as_deref(), Some("Adds"));
    assert_eq!(served.fields.meta.attribution().as_deref(), Some("calc"));
    let mut expected = tool.clone();
    expected["_meta"]["io.mcp-mirror/server"] = json!("calc");
    let value = serde_json::to_value(&served).expect("serialize");
    assert_eq!(value, expected);
    let again: Tool = serde_json::from_value(value.clone()).expect("parse again");
    assert_eq!(again, served);

    let prompt = json!({"name": "greet", "arguments": [{"name": "who"}],
        "_meta": {"io.mcp-mirror/server": "demo"}});
    let served: Prompt =
        Definition::from_stored(&prompt.to_string(), Some("upstream")).expect("parse");
    assert_eq!(
        served.fields.meta.attribution().as_deref(),
        Some("demo via upstream")
    );
    assert_eq!(
        serde_json::to_value(&served).expect("serialize"),
        json!({"name": "greet", "arguments": [{"name": "who"}],
            "_meta": {"io.mcp-mirror/server": "demo", "io.mcp-mirror/via": "upstream"}})
    );
    assert!(Definition::from_stored(r#"{"title": "no name"}"#, None).is_err());
}

#[test]
fn objects_pass_through_exactly_with_our_meta_added() {
    let sent = json!({
        "uri": "file:///a", "name": 7, "title": "A", "size": 3,
        "annotations": {"audience": ["user"]}, "_meta": {"theirs": true}, "extra": null
    });
    let resource = Resource::from_stored(&sent.to_string(), Some("docs")).expect("parse");
    assert_eq!(resource.uri, "file:///a");
    assert_eq!(
        resource.fields.name, None,
        "a name that is not a string stays as sent"
    );
    assert_eq!(resource.origin(), Some("docs"));
    let mut expected = sent.clone();
    expected["_meta"]["io.mcp-mirror/server"] = json!("docs");
    let served = serde_json::to_value(&resource).expect("serialize");
    assert_eq!(served, expected);
    let again: Resource = serde_json::from_value(served.clone()).expect("parse again");
    assert_eq!(serde_json::to_value(&again).expect("serialize"), served);

    let odd_meta = json!({"uri": "u", "_meta": "not an object"});
    let resource = Resource::from_stored(&odd_meta.to_string(), Some("x")).expect("parse");
    assert_eq!(
        serde_json::to_value(&resource).expect("serialize"),
        json!({"uri": "u", "_meta": {"io.mcp-mirror/server": "x"}})
    );
    assert!(Resource::from_stored(r#"{"name": "no uri"}"#, None).is_err());

    let mirrored = json!({"uri": "u", "_meta": {"io.mcp-mirror/server": "demo"}});
    let resource = Resource::from_stored(&mirrored.to_string(), Some("upstream")).expect("parse");
    assert_eq!(
        resource.origin(),
        Some("demo"),
        "the origin survives a mirror of a mirror"
    );
    assert_eq!(
        serde_json::to_value(&resource).expect("serialize"),
        json!({"uri": "u", "_meta": {"io.mcp-mirror/server": "demo", "io.mcp-mirror/via": "upstream"}})
    );

    let read = json!({"contents": [{"uri": "u", "blob": "AA==", "x": 1}], "_meta": {"a": 1}});
    let mut result: ReadResourceResult = serde_json::from_value(read.clone()).expect("read");
    result.meta.cache = Some(CacheNote {
        stored_at_ms: 5,
        reason: "down".into(),
    });
    let mut expected = read;
    expected["_meta"]["io.mcp-mirror/cache"] = json!({"storedAtMs": 5, "reason": "down"});
    assert_eq!(serde_json::to_value(&result).expect("serialize"), expected);
    assert!(serde_json::from_value::<ReadResourceResult>(json!({"x": 1})).is_err());
}

/// The fields' way of writing an entry, which a splice must match byte for byte.
struct ThroughFields<'a>(StoredObject<'a>);

impl serde::Serialize for ThroughFields<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_through_fields(serializer)
    }
}

/// A compact entry is written by splicing its text, and the splice writes exactly the bytes
/// the fields' way writes; any text the splice cannot prove safe (line breaks, spaces between
/// tokens, escaped or repeated keys, a `_meta` that is not an object or holds our keys) goes
/// the fields' way.
#[test]
fn spliced_entries_are_byte_for_byte_what_their_fields_write() {
    let spliced = [
        r#"{"uri":"file:///a","name":"a","size":3}"#,
        r#"{}"#,
        r#"{"uri":"file:///a","_meta":{"theirs":true},"annotations":{"audience":["user"]}}"#,
        r#"{"_meta":{},"uri":"file:///a"}"#,
        r#"{"uri":"file:///a","_meta":{"z":{"b":[1,{"c":null}]},"a":"y","m":2.5}}"#,
        r#"{"uri":"file:///a","_meta":{"io.mcp-mirror/uri":["loopback"],"io.mcp-mirror/key":"k"}}"#,
        r#"{"uri":"file:///a","description":"quote \" and \\ and \n and \u00e9, {not} [a] \"_meta\":1"}"#,
        r#"{"uri":"file:///a","nested":{"a": [1, 2],	"b":{"a":1,"a":2}},"n":-1.5e3,"t":true,"f":false,"z":null}"#,
        r#"{"uri":"é","name":"ünï","_meta":{"ü":"😀"}}"#,
        // Strings and keys longer than a vector of the scan (32 bytes), escapes in and past one.
        r#"{"uri":"file:///a","description":"0123456789012345678901234567890\"x\\y and past the first thirty-two bytes \"q\""}"#,
        r#"{"a key of more than thirty-two bytes, no escape":1,"uri":"file:///a","_meta":{"another key of more than thirty-two bytes":"0123456789012345678901234567890123456789\\"}}"#,
    ];
    let through_fields = [
        "{\n  \"uri\": \"file:///a\",\r\n  \"description\": \"two\\nlines\"\n}",
        r#"{"uri": "file:///a"}"#,
        r#" {"uri":"file:///a"}"#,
        r#"{"uri":"file:///a"} "#,
        r#"{"uri":"file:///a","n":1 }"#,
        r#"{"uri":"file:///a","na\u006de":"escaped key","extra":null}"#,
        r#"{"uri":"file:///a","name":"first","name":"second"}"#,
        r#"{"uri":"file:///a","_meta":"not an object","name":7}"#,
        r#"{"uri":"file:///a","_meta":null}"#,
        r#"{"uri":"file:///a","_meta":{"dup":1,"dup":2}}"#,
        r#"{"uri":"file:///a","_meta":{"io.mcp-mirror/server":"demo","x":1}}"#,
        r#"{"uri":"file:///a","_meta":{"io.mcp-mirror/cache":5,"x":1}}"#,
        r#"{"uri":"file:///a","_meta":{"io.mcp-mirror/via":"v"}}"#,
        r#"{"uri":"file:///a","_meta":{"io.mcp-mirror/ser\u0076er":"demo","x":1}}"#,
        r#"{"uri":"file:///a","_meta":{ "x":1}}"#,
        r#"{"uri":"file:///a","_meta":{"k\"":"x"},"x":[]}"#,
        r#"{"uri":"file:///a","_meta":{"x":1},"_meta":{"y":2}}"#,
        r#"{"uri":"file:///a","a key of more than thirty-two bytes, escaped \u0078":1}"#,
    ];
    let many_fields = format!(
        "{{{}}}",
        (0..40)
            .map(|i| format!("\"f{i}\":{i}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut expected_kept = 0;
    for (raw, splices) in spliced
        .iter()
        .map(|raw| (raw.to_string(), true))
        .chain(through_fields.iter().map(|raw| (raw.to_string(), false)))
        .chain([(many_fields, false)])
    {
        for server in ["docs", "odd \"server\"\t"] {
            let mut text = String::new();
            assert_eq!(
                splice_with_origin(&raw, server, &mut text),
                splices,
                "{raw}"
            );
            let object = StoredObject {
                raw: &raw,
                origin: Some(server),
            };
            let fields = serde_json::to_string(&ThroughFields(object)).expect("fields");
            let written = serde_json::to_string(&object).expect("written");
            assert_eq!(written, fields, "{raw} from {server}");
            if splices {
                assert_eq!(text, fields, "{raw} from {server}");
                expected_kept += 1;
            } else {
                assert!(text.is_empty());
            }
            // The same bytes, read as a tree, for the `Value` serializer too.
            let value = serde_json::to_value(object).expect("value");
            assert_eq!(value, serde_json::from_str::<Value>(&fields).expect("JSON"));
        }
    }
    assert_eq!(expected_kept, spliced.len() * 2);
}
