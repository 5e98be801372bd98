//! Human output: tables, ages, timestamps, and how server-supplied text is shown.

use std::io::IsTerminal;

use serde::Serialize;

/// Pretty JSON on stdout, exactly what the protocol carries.
pub fn print_json(value: &impl Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Prints rows as columns padded to their widest cell; the last column is not padded.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers
        .iter()
        .map(|header| header.chars().count())
        .collect();
    for row in rows {
        for (index, cell) in row.iter().enumerate() {
            widths[index] = widths[index].max(cell.chars().count());
        }
    }
    let render = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let line: Vec<String> = cells
            .into_iter()
            .enumerate()
            .map(|(index, cell)| {
                if index == last {
                    cell
                } else {
                    format!("{cell:<width$}", width = widths[index])
                }
            })
            .collect();
        println!("{}", line.join("  ").trim_end());
    };
    render(headers.iter().map(|header| header.to_string()).collect());
    for row in rows {
        render(row.clone());
    }
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

/// Bold on a terminal; plain markers elsewhere, so piped output stays readable text.
pub fn highlight_markers() -> (&'static str, &'static str) {
    if std::io::stdout().is_terminal() {
        ("\x1b[1m", "\x1b[0m")
    } else {
        crate::protocol::DEFAULT_HIGHLIGHT
    }
}

/// `2026-01-31T12:34:56Z` from milliseconds since the epoch (UTC, proleptic Gregorian).
pub fn utc_timestamp(at_ms: i64) -> String {
    let seconds = at_ms.div_euclid(1000);
    let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm.
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// Decodes standard base64 (padding optional, whitespace ignored); `None` on anything else.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for byte in text.bytes() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' | b' ' => continue,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_what_servers_send() {
        assert_eq!(
            base64_decode("AAEC/w==").as_deref(),
            Some(&[0u8, 1, 2, 255][..])
        );
        assert_eq!(base64_decode("aGVsbG8").as_deref(), Some(&b"hello"[..]));
        assert_eq!(base64_decode("not base64!"), None);
    }

    #[test]
    fn timestamps_are_utc() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_767_225_599_000), "2025-12-31T23:59:59Z");
    }
}
