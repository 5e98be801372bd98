//! Paging the merged catalog through the HTTP face (what a downstream mirror's walk of an
//! upstream does): the daemon's CPU a page, one client on one keep-alive connection.

use std::time::Instant;

use anyhow::{bail, Context as _};
use serde_json::json;

use crate::daemon::{Daemon, DaemonFiles};
use crate::measure::{clock_ticks_per_second, cpu_ticks};
use crate::query::PageAnswer;
use crate::report::{Report, Samples};

const TOKEN: &str = "bench-http-paging-token";

/// The `[http]` table of the query scenario's daemon: a loopback address and one token.
pub fn http_face_table(files: &DaemonFiles, address: &str) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let token = files.path("http.token");
    std::fs::write(&token, format!("{TOKEN}\n"))?;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600))?;
    Ok(format!(
        "[http]\nlisten = \"{address}\"\ntokens = {{ bench = {:?} }}\n",
        token.display().to_string()
    ))
}

/// Pages the whole merged catalog through the HTTP face in the 2026-07-28 era, 3 rounds (the
/// first a warm-up), timing each round and the daemon's CPU.
pub fn http_paging(report: &mut Report, daemon: &Daemon, address: &str) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = reqwest::Client::new();
    let url = format!("http://{address}/mcp");
    let mut seconds = Samples::default();
    let mut daemon_ms_per_page = Samples::default();
    let (mut count, mut pages) = (0usize, 0usize);
    for round in 0..3 {
        let started = Instant::now();
        let daemon_before = cpu_ticks(daemon.process.pid()).unwrap_or(0);
        let mut cursor: Option<String> = None;
        let mut listed = 0usize;
        pages = 0;
        loop {
            let mut params = json!({"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
            }});
            if let Some(cursor) = &cursor {
                params["cursor"] = json!(cursor);
            }
            let body = json!({"jsonrpc": "2.0", "id": pages, "method": "resources/list", "params": params});
            let bytes = runtime.block_on(async {
                let response = client
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .header("MCP-Protocol-Version", "2026-07-28")
                    .header("Mcp-Method", "resources/list")
                    .header("Accept", "application/json, text/event-stream")
                    .json(&body)
                    .send()
                    .await?;
                if !response.status().is_success() {
                    bail!("HTTP {}", response.status());
                }
                Ok(response.bytes().await?)
            })?;
            let answer: PageAnswer = serde_json::from_slice(&bytes).context("a page's answer")?;
            let Some(result) = answer.result else {
                bail!("resources/list over HTTP failed");
            };
            pages += 1;
            listed += result.resources.len();
            match result.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        count = listed;
        if round > 0 {
            seconds.push(started.elapsed().as_secs_f64());
            let ticks = cpu_ticks(daemon.process.pid()).unwrap_or(0) - daemon_before;
            daemon_ms_per_page
                .push(ticks as f64 / clock_ticks_per_second() * 1000.0 / pages as f64);
        }
    }
    report.line(format!(
        "Paging the whole merged `resources/list` ({count} resources, {pages} pages) through the \
         HTTP face (2026-07-28, one keep-alive connection): {} s median (min–max) over {} rounds \
         after a warm-up, {:.0} resources/s; the daemon's CPU per page {} ms.",
        seconds.summary(2),
        seconds.len(),
        count as f64 / seconds.median(),
        daemon_ms_per_page.summary(3),
    ));
    report.line("");
    Ok(())
}
