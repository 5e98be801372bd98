//! Human output: tables that cut wide cells, ages, timestamps, and server-supplied text shown
//! with its control characters escaped (`--json` output stays exact).

use std::io::IsTerminal;

use serde::Serialize;
use tabled::builder::Builder;
use tabled::settings::object::{Columns, Segment};
use tabled::settings::{Padding, Style, Width};

/// The widest a table cell is drawn, in terminal columns; longer values end in "…" (their
/// full text is in `--json`, and `show` prints a resource's fields whole).
pub const MAX_CELL_WIDTH: usize = 120;
/// Spaces between table columns.
const COLUMN_GAP: usize = 2;
const ELLIPSIS: &str = "\u{2026}";

/// The markers the CLI asks the daemon to put around matched words: private-use characters,
/// so they survive escaping and are then drawn as `highlight_markers` say.
pub const SNIPPET_MARKERS: (&str, &str) = ("\u{e000}", "\u{e001}");

/// Pretty JSON on stdout, exactly what the protocol carries.
pub fn print_json(value: &impl Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Server-supplied text as a human may see it: `redact::printable`, the one sanitizer of
/// everything we show (controls and bidirectional formatting characters escaped).
pub use crate::redact::printable as escaped;

/// A snippet escaped, its match markers drawn bold on a terminal and as « » elsewhere.
pub fn shown_snippet(snippet: &str) -> String {
    let (open, close) = highlight_markers();
    escaped(snippet)
        .replace(SNIPPET_MARKERS.0, open)
        .replace(SNIPPET_MARKERS.1, close)
}

/// Bold on a terminal; plain markers elsewhere, so piped output stays readable text.
fn highlight_markers() -> (&'static str, &'static str) {
    if std::io::stdout().is_terminal() {
        ("\x1b[1m", "\x1b[0m")
    } else {
        crate::protocol::DEFAULT_HIGHLIGHT
    }
}

/// Rows as left-aligned columns under a header, cells cut at `MAX_CELL_WIDTH`. Cells must
/// already be escaped where they hold server-supplied text.
pub fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut builder = Builder::default();
    builder.push_record(headers.iter().map(|header| header.to_string()));
    for row in rows {
        builder.push_record(row);
    }
    let mut table = builder.build();
    table
        .with(Style::empty())
        .modify(Segment::all(), Padding::new(0, COLUMN_GAP, 0, 0))
        .modify(Columns::last(), Padding::zero())
        .modify(
            Segment::all(),
            Width::truncate(MAX_CELL_WIDTH).suffix(ELLIPSIS),
        );
    print_lines(&table.to_string());
}

/// Label and value pairs, labels aligned (and cut), values whole.
pub fn print_fields(rows: Vec<(String, String)>) {
    let mut builder = Builder::default();
    for (label, value) in rows {
        builder.push_record([label, value]);
    }
    let mut table = builder.build();
    table
        .with(Style::empty())
        .modify(Columns::first(), Padding::new(0, 1, 0, 0))
        .modify(Columns::last(), Padding::zero())
        .modify(
            Columns::first(),
            Width::truncate(MAX_CELL_WIDTH).suffix(ELLIPSIS),
        );
    print_lines(&table.to_string());
}

fn print_lines(text: &str) {
    let mut stdout = String::with_capacity(text.len());
    for line in text.lines() {
        stdout.push_str(line.trim_end());
        stdout.push('\n');
    }
    print!("{stdout}");
}

/// "3s", "5m", "2h", "4d": how long ago `at_ms` was.
pub fn age(at_ms: Option<i64>) -> String {
    let Some(at_ms) = at_ms else {
        return "-".into();
    };
    let seconds = ((crate::store::now_ms() - at_ms).max(0) / 1000) as u64;
    match seconds {
        0..=59 => format!("{seconds}s"),
        60..=3599 => format!("{}m", seconds / 60),
        3600..=86_399 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// "1,628": a count with thousands separators.
pub fn thousands(count: u64) -> String {
    let digits = count.to_string();
    let mut shown = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            shown.push(',');
        }
        shown.push(digit);
    }
    shown
}

/// "512 B", "48.2 kB", "70.0 MB", "1.2 GB": a size in bytes in the decimal unit that shows it
/// best (`ls -lh --si`), so a small index does not read as "0.0 MB".
pub fn size(bytes: u64) -> String {
    const UNITS: [(f64, &str); 3] = [(1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    match UNITS.iter().find(|(unit, _)| bytes as f64 >= *unit) {
        Some((unit, name)) => format!("{:.1} {name}", bytes as f64 / unit),
        None => format!("{bytes} B"),
    }
}

/// "5s", "5m", "1h30m": an interval as a person reads it.
pub fn interval(milliseconds: u64) -> String {
    let seconds = milliseconds / 1000;
    match seconds {
        0 => format!("{milliseconds}ms"),
        1..=59 => format!("{seconds}s"),
        60..=3599 if seconds % 60 == 0 => format!("{}m", seconds / 60),
        60..=3599 => format!("{}m{}s", seconds / 60, seconds % 60),
        _ if seconds % 3600 == 0 => format!("{}h", seconds / 3600),
        _ => format!("{}h{}m", seconds / 3600, seconds % 3600 / 60),
    }
}

/// `2026-01-31T12:34:56Z` from milliseconds since the epoch (UTC, whole seconds).
pub fn utc_timestamp(at_ms: i64) -> String {
    match jiff::Timestamp::from_second(at_ms.div_euclid(1000)) {
        Ok(timestamp) => timestamp.to_string(),
        // Outside the years -9999..=9999: no date to show, so the number itself.
        Err(_) => format!("{at_ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_intervals_read_as_people_write_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_628), "1,628");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(interval(500), "500ms");
        assert_eq!(interval(5_000), "5s");
        assert_eq!(interval(300_000), "5m");
        assert_eq!(interval(90_000), "1m30s");
        assert_eq!(interval(5_400_000), "1h30m");
        assert_eq!(size(0), "0 B");
        assert_eq!(size(999), "999 B");
        assert_eq!(size(48_213), "48.2 kB");
        assert_eq!(size(70_000_000), "70.0 MB");
        assert_eq!(size(1_234_000_000), "1.2 GB");
    }

    #[test]
    fn timestamps_are_utc() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_767_225_599_999), "2025-12-31T23:59:59Z");
        assert_eq!(utc_timestamp(i64::MAX), format!("{} ms", i64::MAX));
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(escaped("plain «text»"), "plain «text»");
        assert_eq!(
            escaped("\x1b]0;x\x07\x1b[2J\nnext\u{9b}"),
            "\\u{1b}]0;x\\u{7}\\u{1b}[2J\\nnext\\u{9b}"
        );
        let snippet = format!("a {}match{} \x1b[2J", SNIPPET_MARKERS.0, SNIPPET_MARKERS.1);
        let shown = shown_snippet(&snippet);
        assert!(!shown.contains("\x1b[2J"), "{shown:?}");
        assert!(shown.contains("match"), "{shown:?}");
    }
}
