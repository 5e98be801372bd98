//! Keeps configured secrets out of every text we emit (log lines, status answers, stored
//! errors), and bounds the server-supplied strings we keep.
//!
//! Secrets are `SecretString`s, sensitive header values and `env` values redacted in `Debug`
//! everywhere they travel, so this is the second line of defence: a server that echoes our
//! token or its API key in an error, or a library that formats a request, still cannot put
//! it in a log line, in `catalog/status` or in the database.

use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::RwLock;

use serde_json::value::RawValue;
use serde_json::Value;

/// What a secret becomes when scrubbed.
pub(crate) const REDACTED: &str = "<redacted>";

/// Shorter values cannot be scrubbed by substring without mangling ordinary text (a header
/// value "1" would redact every digit), and are not credentials anyway.
pub(crate) const MIN_SCRUBBED_LENGTH: usize = 8;

/// The most of one server-supplied string (an error text, a `serverInfo` field, a stderr
/// line) that we store, log or echo; the rest is cut and counted.
pub(crate) const MAX_SERVER_TEXT_BYTES: usize = 8 << 10;

/// Every secret any configuration of this process has held; reloads only add to it, so a
/// message about the old token that is still in flight stays scrubbed.
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// The secrets as they are and as a JSON string escapes them (where that differs), longest
/// first: what a listed entry's text is searched for.
static SECRET_FORMS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Adds secrets to scrub from now on.
pub fn remember_secrets<'a>(secrets: impl IntoIterator<Item = &'a str>) {
    let mut known = SECRETS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for secret in secrets {
        if secret.len() >= MIN_SCRUBBED_LENGTH && !known.iter().any(|known| known == secret) {
            known.push(secret.to_string());
        }
    }
    // Longest first, so a secret that contains another is replaced whole.
    known.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    let mut forms: Vec<String> = known
        .iter()
        .flat_map(|secret| {
            let quoted = serde_json::to_string(secret).unwrap_or_default();
            let escaped = quoted
                .get(1..quoted.len().saturating_sub(1))
                .unwrap_or_default()
                .to_string();
            [secret.clone(), escaped]
        })
        .filter(|form| !form.is_empty())
        .collect();
    forms.sort_by_key(|form| std::cmp::Reverse(form.len()));
    forms.dedup();
    *SECRET_FORMS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = forms;
}

/// `text` with every known secret replaced by `REDACTED`.
pub fn scrub(text: &str) -> Cow<'_, str> {
    let known = SECRETS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut scrubbed = Cow::Borrowed(text);
    for secret in known.iter() {
        if scrubbed.contains(secret.as_str()) {
            scrubbed = Cow::Owned(scrubbed.replace(secret.as_str(), REDACTED));
        }
    }
    scrubbed
}

/// A listed entry (its JSON text as the server sent it) with every known secret replaced, as
/// it enters the mirror: a server that reflects our token into a description never gets it
/// stored or served. A secret is looked for as it is and as JSON escapes it; the common case
/// (no secret in the text) returns the text untouched, without parsing it.
pub(crate) fn scrub_entry(entry: Box<RawValue>) -> Box<RawValue> {
    let forms = SECRET_FORMS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let text = entry.get();
    if !forms.iter().any(|form| text.contains(form.as_str())) {
        return entry;
    }
    let mut scrubbed = text.to_string();
    for form in forms.iter() {
        if scrubbed.contains(form.as_str()) {
            scrubbed = scrubbed.replace(form.as_str(), REDACTED);
        }
    }
    drop(forms);
    match RawValue::from_string(scrubbed) {
        Ok(scrubbed) => scrubbed,
        // A secret that spanned the JSON's structure: scrub its strings one by one instead.
        Err(_) => {
            let mut value: Value = serde_json::from_str(entry.get()).unwrap_or(Value::Null);
            scrub_json(&mut value);
            serde_json::value::to_raw_value(&value).unwrap_or(entry)
        }
    }
}

/// `text` cut to at most `MAX_SERVER_TEXT_BYTES` (at a character boundary), with
/// "… (N bytes more)" appended when anything was cut.
pub(crate) fn truncate_server_text(text: &str) -> Cow<'_, str> {
    if text.len() <= MAX_SERVER_TEXT_BYTES {
        return Cow::Borrowed(text);
    }
    let mut end = MAX_SERVER_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}… ({} bytes more)",
        &text[..end],
        text.len() - end
    ))
}

/// A server-supplied text as we keep it: scrubbed of known secrets, then bounded. Scrubbing
/// comes first, so a cut can never leave the first half of a secret behind.
pub(crate) fn scrub_server_text(text: &str) -> String {
    truncate_server_text(&scrub(text)).into_owned()
}

/// The most of one server-supplied JSON value (`serverInfo`, `capabilities`) that we keep,
/// serialized; a larger one is kept as its bounded text instead.
pub(crate) const MAX_SERVER_JSON_BYTES: usize = 4 * MAX_SERVER_TEXT_BYTES;

/// A server-supplied JSON value as we keep it: every string scrubbed and bounded, and the
/// whole no larger than `MAX_SERVER_JSON_BYTES` (else replaced by its bounded text).
pub(crate) fn scrub_server_json(value: &mut Value) {
    scrub_json(value);
    bound_json_strings(value);
    let serialized = value.to_string();
    if serialized.len() > MAX_SERVER_JSON_BYTES {
        *value = Value::String(truncate_server_text(&serialized).into_owned());
    }
}

/// Bounds every string inside a JSON value to `MAX_SERVER_TEXT_BYTES`.
pub(crate) fn bound_json_strings(value: &mut Value) {
    each_json_string(value, truncate_server_text);
}

/// Scrubs every string (keys too) inside a JSON value.
pub(crate) fn scrub_json(value: &mut Value) {
    each_json_string(value, scrub);
}

/// Replaces every string inside `value` (object keys too) by what `change` makes of it. A
/// loop with a stack of its own, not recursion: the depth is the server's to choose (the parser
/// stops at 128 levels, but a `Value` may be built otherwise), the stack is ours.
fn each_json_string(value: &mut Value, change: impl Fn(&str) -> Cow<'_, str>) {
    let mut pending: Vec<&mut Value> = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::String(text) => {
                if let Cow::Owned(changed) = change(text) {
                    *text = changed;
                }
            }
            Value::Array(items) => pending.extend(items.iter_mut()),
            Value::Object(object) => {
                if object
                    .keys()
                    .any(|key| matches!(change(key), Cow::Owned(_)))
                {
                    let entries = std::mem::take(object);
                    for (key, item) in entries {
                        object.insert(change(&key).into_owned(), item);
                    }
                }
                pending.extend(object.values_mut());
            }
            _ => {}
        }
    }
}

/// Whether `character` must not reach a terminal as itself: C0 and C1 controls and DEL (ESC
/// starts cursor moves, title changes and screen clears, BEL rings) and the bidirectional
/// formatting characters (U+202A-202E embeddings and overrides, U+2066-2069 isolates, the marks
/// U+200E, U+200F, U+061C), which make text read in another order than it is.
pub fn is_unprintable(character: char) -> bool {
    character.is_control()
        || matches!(
            character,
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
        )
}

/// The one sanitizer of text a human reads (the CLI's output and errors, the human log): every
/// `is_unprintable` character written as its Rust escape (`\u{1b}`, `\u{7}`, `\n`,
/// `\u{202e}`), so a server cannot move the cursor, retitle the window, clear the screen or
/// reorder what we show.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unprintable) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for character in text.chars() {
        if is_unprintable(character) {
            shown.extend(character.escape_default());
        } else {
            shown.push(character);
        }
    }
    Cow::Owned(shown)
}

/// A JSON log line with the unprintable characters serde_json leaves raw (DEL, C1 controls,
/// bidirectional formatting) written as JSON escapes (`\u202e`); it stays the same JSON.
fn json_printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unprintable) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for character in text.chars() {
        // serde_json already escaped the C0 controls inside strings; a newline ends the line.
        if is_unprintable(character) && character != '\n' {
            shown.push_str(&format!("\\u{:04x}", u32::from(character)));
        } else {
            shown.push(character);
        }
    }
    Cow::Owned(shown)
}

/// The longest log line we write; server texts in it are bounded where they enter, so this
/// only catches what slipped past (a server's cursor quoted in a walk error, say).
pub(crate) const MAX_LOG_LINE_BYTES: usize = 64 << 10;

/// Standard error with known secrets scrubbed from every write, unprintable characters
/// escaped (`printable`; in JSON lines, as JSON escapes) and every line bounded to
/// `MAX_LOG_LINE_BYTES`; the logger formats each event into one buffer and writes it at once,
/// so a secret is never split across writes and a server's newline cannot start a line of its
/// own.
#[derive(Clone, Copy, Debug)]
pub struct ScrubbedStderr {
    /// The lines are JSON objects (`--log-format json`), not text.
    pub json: bool,
}

/// One formatted log event as it is written: scrubbed, unprintable characters escaped, then
/// cut to `MAX_LOG_LINE_BYTES` (keeping its final newline).
fn log_line(text: &str, json: bool) -> Cow<'_, str> {
    let scrubbed = scrub(text);
    let (body, newline) = match scrubbed.strip_suffix('\n') {
        Some(body) => (body, "\n"),
        None => (scrubbed.as_ref(), ""),
    };
    let shown = if json {
        json_printable(body)
    } else {
        printable(body)
    };
    if matches!(shown, Cow::Borrowed(_)) && body.len() <= MAX_LOG_LINE_BYTES {
        return scrubbed;
    }
    if shown.len() <= MAX_LOG_LINE_BYTES {
        return Cow::Owned(format!("{shown}{newline}"));
    }
    let mut end = MAX_LOG_LINE_BYTES;
    while !shown.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}… ({} bytes more){newline}",
        &shown[..end],
        shown.len() - end
    ))
}

impl Write for ScrubbedStderr {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buffer);
        io::stderr().write_all(log_line(&text, self.json).as_bytes())?;
        Ok(buffer.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for ScrubbedStderr {
    type Writer = ScrubbedStderr;

    fn make_writer(&'a self) -> Self::Writer {
        *self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sanitizer_escapes_controls_and_bidirectional_formatting() {
        let hostile = "a\u{1b}[2J\u{7}\u{9b}b\u{202e}c\u{2066}\u{200f}\u{61c}\u{7f}";
        assert_eq!(
            printable(hostile),
            "a\\u{1b}[2J\\u{7}\\u{9b}b\\u{202e}c\\u{2066}\\u{200f}\\u{61c}\\u{7f}"
        );
        assert!(matches!(printable("café 中文 ✓"), Cow::Borrowed(_)));
        assert_eq!(
            log_line("WARN error=\"x\u{1b}]0;t\u{7}\nforged\u{202e}\"\n", false),
            "WARN error=\"x\\u{1b}]0;t\\u{7}\\nforged\\u{202e}\"\n"
        );
        let json_line = "{\"error\":\"x\u{202e}\u{9b}\"}\n";
        let written = log_line(json_line, true);
        assert_eq!(written, "{\"error\":\"x\\u202e\\u009b\"}\n");
        let parsed: Value = serde_json::from_str(&written).expect("still JSON");
        assert_eq!(parsed["error"], "x\u{202e}\u{9b}");
    }

    #[test]
    fn deep_json_is_scrubbed_and_bounded_without_recursion() {
        remember_secrets(["tok-deep-test-5678"]);
        let depth = 200_000;
        let mut value = Value::String(format!("tok-deep-test-5678 {}", "x".repeat(20_000)));
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        scrub_json(&mut value);
        bound_json_strings(&mut value);
        // Taken apart in a loop too: dropping a Value this deep would recurse.
        let mut innermost = value;
        while let Value::Array(mut items) = innermost {
            innermost = items.pop().expect("one item");
        }
        let text = innermost.as_str().expect("the string");
        assert!(text.starts_with("<redacted> x"), "{}", &text[..40]);
        assert!(text.len() < 9_000, "{}", text.len());
    }

    #[test]
    fn scrubs_known_secrets_everywhere_in_json() {
        remember_secrets(["tok-scrub-test-1234", "short"]);
        assert_eq!(scrub("Bearer tok-scrub-test-1234!"), "Bearer <redacted>!");
        assert_eq!(scrub("short stays"), "short stays");
        let mut value =
            serde_json::json!({"a": ["x tok-scrub-test-1234"], "tok-scrub-test-1234": 1});
        scrub_json(&mut value);
        assert_eq!(
            value,
            serde_json::json!({"a": ["x <redacted>"], "<redacted>": 1})
        );
    }

    #[test]
    fn listed_entries_lose_secrets_as_they_are_and_as_json_escapes_them() {
        remember_secrets(["tok-entry-5150abcd", "quote\"in-secret"]);
        let entry = |text: &str| serde_json::value::RawValue::from_string(text.into()).unwrap();
        let reflected = scrub_entry(entry(
            r#"{"uri":"a://1","description":"Authorization: Bearer tok-entry-5150abcd"}"#,
        ));
        assert_eq!(
            reflected.get(),
            r#"{"uri":"a://1","description":"Authorization: Bearer <redacted>"}"#
        );
        let escaped = scrub_entry(entry(r#"{"uri":"a://2","name":"quote\"in-secret"}"#));
        assert_eq!(escaped.get(), r#"{"uri":"a://2","name":"<redacted>"}"#);
        let clean = r#"{"uri":"a://3","name":"nothing to see"}"#;
        assert_eq!(scrub_entry(entry(clean)).get(), clean);
    }

    #[test]
    fn server_text_is_bounded_at_a_character_boundary() {
        assert_eq!(truncate_server_text("short"), "short");
        let exact = "a".repeat(MAX_SERVER_TEXT_BYTES);
        assert_eq!(truncate_server_text(&exact), exact.as_str());
        // 'é' is two bytes: the limit falls inside one, so the cut moves before it.
        let text = format!(
            "{}é{}",
            "a".repeat(MAX_SERVER_TEXT_BYTES - 1),
            "b".repeat(100)
        );
        let bounded = truncate_server_text(&text);
        assert_eq!(
            bounded,
            format!(
                "{}… (102 bytes more)",
                "a".repeat(MAX_SERVER_TEXT_BYTES - 1)
            )
        );
    }

    #[test]
    fn log_lines_are_bounded_and_keep_their_newline() {
        let line = format!("{}\n", "l".repeat(MAX_LOG_LINE_BYTES * 3));
        let written = log_line(&line, false);
        assert!(written.len() < MAX_LOG_LINE_BYTES + 40);
        assert!(
            written.ends_with(" bytes more)\n"),
            "{}",
            &written[written.len() - 30..]
        );
        assert_eq!(log_line("short\n", false), "short\n");
    }

    #[test]
    fn server_json_is_bounded_string_by_string_and_whole() {
        let mut info = serde_json::json!({"name": "x".repeat(100_000), "version": "1"});
        scrub_server_json(&mut info);
        let name = info["name"].as_str().expect("a string still");
        assert!(name.len() < MAX_SERVER_TEXT_BYTES + 40, "{}", name.len());
        let many: serde_json::Map<String, Value> = (0..10_000)
            .map(|index| (format!("key{index}"), Value::from(index)))
            .collect();
        let mut huge = Value::Object(many);
        scrub_server_json(&mut huge);
        assert!(huge
            .as_str()
            .is_some_and(|text| text.ends_with(" bytes more)")));
    }

    #[test]
    fn server_text_is_scrubbed_before_it_is_cut() {
        let secret = "tok-straddles-the-cut-5150";
        remember_secrets([secret]);
        let text = format!(
            "{}{secret}{}",
            "a".repeat(MAX_SERVER_TEXT_BYTES - 5),
            "z".repeat(50)
        );
        let kept = scrub_server_text(&text);
        assert!(!kept.contains(&secret[..5]), "{}", &kept[kept.len() - 40..]);
        assert!(
            kept.ends_with(" bytes more)"),
            "{}",
            &kept[kept.len() - 40..]
        );
    }
}
