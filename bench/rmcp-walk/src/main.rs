//! The official Rust MCP SDK's client walking a catalog: a `list_resources` cursor loop that
//! stores nothing, the rmcp contender of `bench/run walk` (as bench/python_walk.py is Python's).
//!
//! Usage: `rmcp-walk http URL ROUNDS` | `rmcp-walk stdio ROUNDS COMMAND [ARGS...]`.
//! Prints one JSON line per round: `{"seconds": s, "cpu_seconds": c, "resources": n, "pages": p}`
//! (`cpu_seconds`: this process's user + system time in the round). Only the list loop is timed: process start and the handshake are left out, as for the Python client.
//! It uses the handshake era (`initialize`), like the other contenders of the walk table.

use std::time::Instant;

use anyhow::{bail, Context as _};
use rmcp::model::PaginatedRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt as _};

/// This process's CPU time (user + system, every thread) so far, in seconds.
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes only into the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return f64::NAN;
        }
        usage
    };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

async fn walk(client: &RunningService<RoleClient, ()>) -> anyhow::Result<()> {
    let started = Instant::now();
    let cpu_started = own_cpu_seconds();
    let mut cursor: Option<String> = None;
    let mut resources = 0usize;
    let mut pages = 0usize;
    loop {
        let params = cursor
            .take()
            .map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let page = client
            .list_resources(params)
            .await
            .context("while listing resources")?;
        resources += page.resources.len();
        pages += 1;
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "seconds": seconds,
            "cpu_seconds": own_cpu_seconds() - cpu_started,
            "resources": resources,
            "pages": pages,
        })
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: rmcp-walk http URL ROUNDS | rmcp-walk stdio ROUNDS COMMAND [ARGS...]";
    let (client, rounds) = match arguments.first().map(String::as_str) {
        Some("http") if arguments.len() == 3 => {
            let rounds: usize = arguments[2].parse().context("ROUNDS")?;
            let transport = StreamableHttpClientTransport::from_uri(arguments[1].clone());
            let client = ().serve(transport).await.context("while connecting")?;
            (client, rounds)
        }
        Some("stdio") if arguments.len() >= 3 => {
            let rounds: usize = arguments[1].parse().context("ROUNDS")?;
            let mut command = tokio::process::Command::new(&arguments[2]);
            command.args(&arguments[3..]);
            let transport = TokioChildProcess::new(command).context("while starting the server")?;
            let client = ().serve(transport).await.context("while connecting")?;
            (client, rounds)
        }
        _ => bail!("{usage}"),
    };
    for _ in 0..rounds {
        walk(&client).await?;
    }
    client.cancel().await.context("while closing")?;
    Ok(())
}
