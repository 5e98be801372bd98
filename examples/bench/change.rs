//! Change latency: `list_changed` sent by the fixture to the new resource visible on the socket.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;

use crate::daemon::{fixture_stdio_table, start_daemon, start_http_fixture, DaemonFiles};
use crate::measure::{now_us, parse_timestamp_us};
use crate::process::{http_server_table, write_json_atomically};
use crate::report::{Report, Samples};
use crate::walk::Wire;

/// Timestamps (µs) of the fixture's "scenario reloaded" lines, in order, from its own log or
/// relayed by the daemon from a stdio child's stderr.
fn reload_times(log: &str) -> Vec<i64> {
    log.lines()
        .filter(|line| line.contains("scenario reloaded"))
        .filter_map(|line| {
            let own = line.split("child stderr: ").nth(1).unwrap_or(line);
            parse_timestamp_us(own.split_whitespace().next()?)
        })
        .collect()
}

struct ChangeCase {
    era: &'static str,
    wire: Wire,
    debounce: &'static str,
}

pub fn run(report: &mut Report) -> anyhow::Result<()> {
    report.line("## Change latency: list_changed to visible, 1,000 resources");
    report.line("");
    let cases = [
        ChangeCase {
            era: "legacy",
            wire: Wire::Stdio,
            debounce: "100ms",
        },
        ChangeCase {
            era: "legacy",
            wire: Wire::Http,
            debounce: "100ms",
        },
        ChangeCase {
            era: "modern",
            wire: Wire::Stdio,
            debounce: "100ms",
        },
        ChangeCase {
            era: "modern",
            wire: Wire::Http,
            debounce: "100ms",
        },
        ChangeCase {
            era: "legacy",
            wire: Wire::Stdio,
            debounce: "10ms",
        },
        ChangeCase {
            era: "modern",
            wire: Wire::Http,
            debounce: "10ms",
        },
    ];
    let mut rows = Vec::new();
    for case in &cases {
        eprintln!(
            "change: {} era, {}, debounce {}",
            case.era,
            case.wire.label(),
            case.debounce
        );
        let files = DaemonFiles::fresh("change")?;
        let scenario_path = files.path("scenario.json");
        let scenario = |marker: usize| {
            json!({"generate": 1000, "page_size": 100, "resources": [{
                "uri": format!("bench://change/{marker}"),
                "name": format!("changemarker{marker}"),
                "mimeType": "text/plain",
            }]})
        };
        write_json_atomically(&scenario_path, &scenario(0))?;
        let args = vec![
            "--name".into(),
            "change".into(),
            "--era".into(),
            case.era.into(),
            "--scenario".into(),
            scenario_path.display().to_string(),
        ];
        let fixture_log = files.path("fixture.log");
        let http = match case.wire {
            Wire::Http => Some(start_http_fixture(&args, &fixture_log)?),
            Wire::Stdio => None,
        };
        let server_table = match &http {
            Some(fixture) => http_server_table("change", &fixture.url),
            None => fixture_stdio_table("change", &args),
        };
        let config = files.config(&format!("debounce = \"{}\"", case.debounce), &server_table)?;
        let daemon = start_daemon(&files, &config)?;
        daemon.wait_for_walks(1, Duration::from_secs(60))?;
        let push = daemon.server_status("change")?;
        let reload_log = || match case.wire {
            Wire::Http => std::fs::read_to_string(&fixture_log).unwrap_or_default(),
            Wire::Stdio => daemon.log_text(),
        };
        let mut client = daemon.client()?;
        let mut from_send = Samples::default();
        let mut from_write = Samples::default();
        let rounds = 101;
        for marker in 1..=rounds {
            let reloads_before = reload_times(&reload_log()).len();
            let written = now_us();
            write_json_atomically(&scenario_path, &scenario(marker))?;
            let deadline = Instant::now() + Duration::from_secs(30);
            let visible = loop {
                let found = client.call(
                    "catalog/search",
                    json!({"query": format!("changemarker{marker}"), "limit": 1}),
                )?;
                if found["results"]
                    .as_array()
                    .is_some_and(|results| !results.is_empty())
                {
                    break now_us();
                }
                if Instant::now() > deadline {
                    bail!(
                        "change {marker} never became visible ({} era, {})",
                        case.era,
                        case.wire.label()
                    );
                }
                std::thread::sleep(Duration::from_micros(500));
            };
            // The fixture logs "scenario reloaded" right after sending list_changed.
            let sent = reload_times(&reload_log()).get(reloads_before).copied();
            if marker == 1 {
                continue; // warm-up
            }
            from_write.push((visible - written) as f64 / 1000.0);
            if let Some(sent) = sent {
                from_send.push((visible - sent) as f64 / 1000.0);
            }
        }
        let era = if push["protocolVersion"]
            .as_str()
            .unwrap_or("")
            .starts_with("2026")
        {
            "stateless (2026-07-28)"
        } else {
            "handshake (2025-11-25)"
        };
        let channel = push["live"]["push"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| push["live"]["push"].to_string());
        rows.push(vec![
            format!("{era}, {}", case.wire.label()),
            channel,
            case.debounce.into(),
            from_send.len().to_string(),
            format!("{:.1}", from_send.median()),
            format!("{:.1}", from_send.quantile(0.99)),
            format!("{:.1}", from_write.median()),
            format!("{:.1}", from_write.quantile(0.99)),
        ]);
        drop(daemon);
        drop(http);
    }
    report.table(
        &[
            "era, transport",
            "push channel",
            "debounce",
            "changes",
            "p50 ms from send",
            "p99 ms from send",
            "p50 ms from file write",
            "p99 ms from file write",
        ],
        &rows,
    );
    report.line(
        "*From send*: from the fixture's own log timestamp of the reload that sent \
         `notifications/resources/list_changed` to the new resource found by `catalog/search` \
         (polled every 0.5 ms); 100 changes after one warm-up, each adding one resource and \
         removing the previous one. *From file write* adds the fixture's 100 ms scenario-file \
         poll. The floor is the session's debounce (quiet time after a notification before \
         walking); 100 ms is the default.",
    );
    report.line("");
    Ok(())
}
