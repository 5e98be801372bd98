//! Keeps configured secrets out of every text we emit: log lines, status answers, stored errors.
//!
//! Secrets are `Secret` values and sensitive header values everywhere they travel, so this is
//! the second line of defence: a server that echoes our token in an error body, or a library
//! that formats a request, still cannot put the token in a log line or in `catalog/status`.

use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::RwLock;

use serde_json::Value;

/// What a secret becomes when scrubbed.
pub const REDACTED: &str = "<redacted>";

/// Shorter values cannot be scrubbed by substring without mangling ordinary text (a header
/// value "1" would redact every digit), and are not credentials anyway.
pub const MIN_SCRUBBED_LENGTH: usize = 8;

/// Every secret any configuration of this process has held; reloads only add to it, so a
/// message about the old token that is still in flight stays scrubbed.
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

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

/// Scrubs every string (keys too) inside a JSON value.
pub fn scrub_json(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let Cow::Owned(scrubbed) = scrub(text) {
                *text = scrubbed;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub_json),
        Value::Object(object) => {
            let needs_key_scrub = object.keys().any(|key| matches!(scrub(key), Cow::Owned(_)));
            if needs_key_scrub {
                let entries = std::mem::take(object);
                for (key, mut item) in entries {
                    scrub_json(&mut item);
                    object.insert(scrub(&key).into_owned(), item);
                }
            } else {
                object.values_mut().for_each(scrub_json);
            }
        }
        _ => {}
    }
}

/// Standard error with known secrets scrubbed from every write; the logger formats each event
/// into one buffer and writes it at once, so a secret is never split across writes.
pub struct ScrubbedStderr;

impl Write for ScrubbedStderr {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buffer);
        io::stderr().write_all(scrub(&text).as_bytes())?;
        Ok(buffer.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for ScrubbedStderr {
    type Writer = ScrubbedStderr;

    fn make_writer(&'a self) -> Self::Writer {
        ScrubbedStderr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
