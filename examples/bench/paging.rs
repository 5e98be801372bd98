//! Paging the whole merged catalog as one client does, through the socket and through the HTTP
//! face (what a downstream mirror's walk of an upstream asks): each round's time, the daemon's
//! CPU a page and the client's own CPU.

use std::time::Instant;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use crate::daemon::{Daemon, DaemonFiles};
use crate::measure::{cpu_seconds, own_cpu_seconds};
use crate::report::{Report, Samples};

const TOKEN: &str = "bench-http-paging-token";

/// One page of `resources/list` as the paging client reads it: the entries counted, not
/// parsed into trees, so the client's own cost stays small beside the daemon's.
#[derive(serde::Deserialize)]
struct PageAnswer {
    result: Option<PageResult>,
    error: Option<Value>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PageResult {
    resources: Vec<serde::de::IgnoredAny>,
    next_cursor: Option<String>,
}

/// What the rounds of paging measured (the first round a warm-up).
#[derive(Default)]
struct Rounds {
    count: usize,
    pages: usize,
    seconds: Samples,
    daemon_ms_per_page: Samples,
    client_share: Samples,
}

impl Rounds {
    /// Pages the whole catalog 3 times; `page(params, text)` asks for one page and puts its
    /// answer's text in `text` (one buffer for every page, as a client keeps).
    fn run(
        daemon: &Daemon,
        mut page: impl FnMut(Value, &mut Vec<u8>) -> anyhow::Result<()>,
    ) -> anyhow::Result<Rounds> {
        let mut text = Vec::new();
        let mut rounds = Rounds::default();
        for round in 0..3 {
            let started = Instant::now();
            let daemon_before = cpu_seconds(daemon.process.pid()).unwrap_or(0.0);
            let client_before = own_cpu_seconds();
            let mut cursor: Option<String> = None;
            let (mut listed, mut pages) = (0usize, 0usize);
            loop {
                let params = match &cursor {
                    Some(cursor) => json!({"cursor": cursor}),
                    None => json!({}),
                };
                text.clear();
                page(params, &mut text)?;
                let answer: PageAnswer =
                    serde_json::from_slice(&text).context("a page's answer")?;
                let Some(result) = answer.result else {
                    bail!(
                        "resources/list failed: {}",
                        answer.error.unwrap_or_default()
                    );
                };
                pages += 1;
                listed += result.resources.len();
                match result.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            (rounds.count, rounds.pages) = (listed, pages);
            let elapsed = started.elapsed().as_secs_f64();
            if round > 0 {
                rounds.seconds.push(elapsed);
                let spent = cpu_seconds(daemon.process.pid()).unwrap_or(0.0) - daemon_before;
                rounds
                    .daemon_ms_per_page
                    .push(spent * 1000.0 / pages as f64);
                rounds
                    .client_share
                    .push((own_cpu_seconds() - client_before) / elapsed);
            }
        }
        Ok(rounds)
    }

    /// The report's line: `how` names the way the pages went.
    fn line(&self, report: &mut Report, how: &str) {
        report.line(format!(
            "Paging the whole merged `resources/list` ({} resources, {} pages of {}) {how}: {} s \
             median (min–max) over {} rounds after a warm-up, {:.0} resources/s, {:.3} ms a page; \
             the daemon's CPU per page {} ms; the client's own CPU (it counts the entries without \
             parsing them into trees) {} of the time.",
            self.count,
            self.pages,
            self.count.div_ceil(self.pages.max(1)),
            self.seconds.summary(2),
            self.seconds.len(),
            self.count as f64 / self.seconds.median(),
            self.seconds.median() * 1000.0 / self.pages.max(1) as f64,
            self.daemon_ms_per_page.summary(3),
            self.client_share.summary(2),
        ));
        report.line("");
    }
}

/// Pages the whole merged catalog through one socket connection.
pub fn socket_paging(report: &mut Report, daemon: &Daemon) -> anyhow::Result<()> {
    use std::io::{BufRead, BufReader, Write};
    let stream = std::os::unix::net::UnixStream::connect(&daemon.socket)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut id = 0u64;
    let rounds = Rounds::run(daemon, |params, line| {
        id += 1;
        let request =
            json!({"jsonrpc": "2.0", "id": id, "method": "resources/list", "params": params});
        let mut bytes = serde_json::to_vec(&request)?;
        bytes.push(b'\n');
        writer.write_all(&bytes)?;
        if reader.read_until(b'\n', line)? == 0 {
            bail!("the daemon closed the connection while paging");
        }
        Ok(())
    })?;
    rounds.line(report, "through one socket client");
    Ok(())
}

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

/// Pages the whole merged catalog through the HTTP face in the 2026-07-28 era, on one
/// keep-alive connection.
pub fn http_paging(report: &mut Report, daemon: &Daemon, address: &str) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = reqwest::Client::new();
    let url = format!("http://{address}/mcp");
    let mut id = 0u64;
    let rounds = Rounds::run(daemon, |mut params, text| {
        id += 1;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        });
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": "resources/list", "params": params});
        runtime.block_on(async {
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
            text.extend_from_slice(&response.bytes().await?);
            Ok(())
        })
    })?;
    rounds.line(
        report,
        "through the HTTP face (2026-07-28, one keep-alive connection)",
    );
    Ok(())
}
