//! `mcp-mirror status`: the daemon's state, each server's row (its kinds, drift, push
//! channel) and the search index, as a table or JSON.

use std::path::Path;
use std::time::Duration;

use super::client::Client;
use super::render::{age, escaped, interval, print_json, print_table, size, thousands};
use super::ClientError;
use crate::protocol::{CatalogStatus, Era, Kind, LiveStatus, NoParams, PushChannel, ServerState};

/// How long `status` (and `watch`, in `commands`) waits for the daemon's answer.
pub(super) const STATUS_TIMEOUT: Duration = Duration::from_secs(30);

// Over 100 lines on purpose: the status table, one block per section of `catalog/status` in the
// order it prints.
pub fn status(socket: &Path, as_json: bool) -> Result<(), ClientError> {
    let status =
        Client::connect(socket)?.call::<CatalogStatus>(&NoParams {}, Some(STATUS_TIMEOUT))?;
    if as_json {
        print_json(&status);
        return Ok(());
    }
    let daemon = &status.daemon;
    // The merged catalog's size first (what `ls` lists), then what the snapshots hold,
    // where a URI two servers list counts twice.
    let listing_servers = status
        .servers
        .iter()
        .filter(|server| server.resources > 0)
        .count();
    let counts = match daemon.merged_resources {
        Some(merged) => format!(
            "{} resources ({} listed by {} server{})",
            thousands(merged),
            thousands(daemon.resources),
            listing_servers,
            if listing_servers == 1 { "" } else { "s" }
        ),
        None => format!("{} resources listed", thousands(daemon.resources)),
    };
    println!(
        "mcp-mirror {} · up {}s · {} · database {}",
        daemon.version,
        daemon.uptime_ms / 1000,
        counts,
        shown_path(daemon.database.as_deref()),
    );
    println!(
        "config {} · loaded {} ago",
        shown_path(daemon.config.as_deref()),
        age(Some(daemon.config_loaded_at)),
    );
    if let Some(error) = &daemon.config_error {
        println!(
            "config reload rejected, the previous configuration stays in force: {}",
            escaped(error)
        );
    }
    println!(
        "{}",
        search_index_text(daemon.search_index.as_ref(), daemon.change_seq)
    );
    if let Some(vectors) = &daemon.vectors {
        println!("{}", vectors_text(vectors));
    }
    if let Some(line) = daemon.wal.as_ref().and_then(wal_text) {
        println!("{line}");
    }
    let rows: Vec<Vec<String>> = status
        .servers
        .iter()
        .map(|server| {
            let state = if server.stale && server.state != ServerState::Failed {
                format!("{} (stale)", server.state)
            } else {
                server.state.to_string()
            };
            // What this process knows beyond the database: the era, the actual transport and
            // how changes reach us.
            let live = server.live.as_ref();
            // A server whose notifications come faster than it may be walked says so.
            let state = match live.and_then(|live| live.throttled_until_ms) {
                Some(_) => format!("{state} (throttled)"),
                None => state,
            };
            // A walk in flight says how far it got.
            let state = match live.and_then(|live| live.walk_progress.as_ref()) {
                Some(progress) => format!("{state} ({})", progress_text(progress)),
                None => state,
            };
            let era = match (live.and_then(|live| live.era), &server.protocol_version) {
                (Some(era), Some(version)) => format!("{era} {version}"),
                (None, Some(version)) => version.clone(),
                _ => "-".into(),
            };
            let transport = match live.and_then(|live| live.transport) {
                Some(transport) => transport.to_string(),
                None => server.transport.to_string(),
            };
            let push = match live {
                Some(live) => push_text(live),
                None => "-".into(),
            };
            vec![
                escaped(&server.name).into_owned(),
                state,
                transport,
                escaped(&era).into_owned(),
                escaped(&push).into_owned(),
                server.resources.to_string(),
                kind_count(server, Kind::Tool),
                kind_count(server, Kind::Prompt),
                drift_text(server),
                age(server.snapshot_at_ms),
                escaped(server.last_error.as_deref().unwrap_or_default()).into_owned(),
            ]
        })
        .collect();
    print_table(
        &[
            "SERVER",
            "STATE",
            "TRANSPORT",
            "ERA",
            "PUSH",
            "RESOURCES",
            "TOOLS",
            "PROMPTS",
            "DRIFT",
            "AGE",
            "LAST ERROR",
        ],
        rows,
    );
    Ok(())
}

/// A walk's progress for people: `12 pages, 1,200 entries, 400/s, ~3s left`.
pub(super) fn progress_text(progress: &crate::protocol::WalkProgress) -> String {
    let mut text = format!(
        "{} pages, {} entries, {}/s",
        thousands(progress.pages),
        thousands(progress.entries),
        thousands(progress.per_second)
    );
    if let (Some(expected), Some(eta_ms)) = (progress.expected_entries, progress.eta_ms) {
        text.push_str(&format!(
            " of ~{}, ~{}s left",
            thousands(expected),
            eta_ms.div_ceil(1000)
        ));
    }
    text
}

/// A line on the write-ahead log, only when it is off: past four times the size it restarts
/// at (a large first load's log is truncated back once it restarts).
fn wal_text(wal: &crate::protocol::WalStatus) -> Option<String> {
    let bytes = wal.bytes?;
    if bytes <= 4 * wal.restart_bytes {
        return None;
    }
    let last = match &wal.last_checkpoint {
        Some(last) => format!(
            "last checkpoint ({}) {} ago: {} of {} log pages copied{}",
            last.mode,
            age(Some(last.at_ms)),
            last.copied_pages,
            last.log_pages,
            if last.busy { ", busy" } else { "" }
        ),
        None => "no checkpoint yet".into(),
    };
    Some(format!(
        "write-ahead log {} MiB (restarts past {} MiB){} · {} · {} of {} restarts held off by readers",
        bytes >> 20,
        wal.restart_bytes >> 20,
        if wal.deferred_for_first_load {
            " · checkpoints wait for a first load"
        } else {
            ""
        },
        last,
        wal.restarts_busy,
        wal.restarts,
    ))
}

/// The semantic vectors' line of `status`: state, model, how many entries have their vector,
/// and the arithmetic (vector unit and precision).
fn vectors_text(vectors: &crate::protocol::VectorsStatus) -> String {
    use crate::protocol::VectorsState;
    let state = match vectors.state {
        VectorsState::Loading => "loading the model (searches stay lexical)",
        VectorsState::Embedding => "embedding (searches stay lexical meanwhile)",
        VectorsState::Ready => "ready",
        VectorsState::Failed => "failed (searches stay lexical)",
    };
    let mut line = format!(
        "vectors {state} · {} · {} embedded, {} waiting",
        escaped(&vectors.model),
        thousands(vectors.count),
        thousands(vectors.pending)
    );
    if !vectors.kernel.is_empty() {
        line.push_str(&format!(
            " · {} {}",
            vectors.kernel,
            vectors.precision.name()
        ));
    }
    if let Some(error) = &vectors.error {
        line.push_str(&format!(" · {}", escaped(error)));
    }
    line
}

/// The search index's line of `status`: its state, the generation it reflects beside the
/// change feed's newest (the feed counts every kind's changes, so the two may differ while
/// the index is up to date), its documents and its size on disk.
fn search_index_text(index: Option<&crate::search::IndexStatus>, change_seq: i64) -> String {
    use crate::search::Phase;
    let Some(index) = index else {
        return "search index: off (searches use SQLite full-text search)".into();
    };
    let state = match index.phase {
        Phase::Opening => "opening (searches use SQLite meanwhile)".to_string(),
        Phase::Ready => "ready".to_string(),
        Phase::CatchingUp => match index.pinned_generation {
            Some(pinned) => format!(
                "catching up (searches use SQLite, then the index as of generation {}, meanwhile)",
                thousands(pinned)
            ),
            None => "catching up (searches use SQLite meanwhile)".to_string(),
        },
        Phase::Rebuilding { percent } => {
            format!("rebuilding {percent}% (searches use SQLite meanwhile)")
        }
        Phase::Failed => "failed, see the log (searches use SQLite)".to_string(),
    };
    let generation = match index.generation {
        Some(generation) => {
            let behind = u64::try_from(change_seq)
                .unwrap_or(0)
                .saturating_sub(generation);
            format!(
                "generation {} (change feed at {}, {} newer)",
                thousands(generation),
                thousands(u64::try_from(change_seq).unwrap_or(0)),
                thousands(behind)
            )
        }
        None => "no generation yet".to_string(),
    };
    format!(
        "search index {state} · {generation} · {} documents · {}",
        thousands(index.documents),
        size(index.bytes)
    )
}

/// A server's count of one kind; `-` when that kind is not mirrored (not declared or not chosen).
fn kind_count(server: &crate::protocol::ServerStatus, kind: Kind) -> String {
    match server.kinds.get(&kind) {
        Some(status) => status.count.to_string(),
        None => "-".into(),
    }
}

/// How the server's tools and prompts differ from what was accepted (`mcp-mirror accept`):
/// `-` before any accept, `none`, or the added, removed and changed counts of both kinds.
fn drift_text(server: &crate::protocol::ServerStatus) -> String {
    let drifts: Vec<_> = server
        .kinds
        .values()
        .filter_map(|status| status.drift.as_ref())
        .collect();
    if drifts.is_empty() {
        return "-".into();
    }
    let sum = |count: fn(&crate::protocol::DriftCount) -> u64| -> u64 {
        drifts.iter().map(|drift| count(drift)).sum()
    };
    let (added, removed, changed) = (
        sum(|drift| drift.added),
        sum(|drift| drift.removed),
        sum(|drift| drift.changed),
    );
    if added + removed + changed == 0 {
        return "none".into();
    }
    [(added, "added"), (removed, "removed"), (changed, "changed")]
        .iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, word)| format!("{count} {word}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How changes reach the mirror, in words a user acts on: for a server that is polled, how
/// often and why, and what may let it push.
fn push_text(live: &LiveStatus) -> String {
    let Some(push) = &live.push else {
        return "-".into();
    };
    let PushChannel::Polling(reason) = push else {
        return push.to_string();
    };
    let every = match live.poll_interval_ms {
        Some(milliseconds) => format!(" every {}", interval(milliseconds)),
        None => String::new(),
    };
    // Some servers (fastmcp 4.x) declare no listChanged in the stateless era yet push in
    // the handshake era: pinning that era is the one thing the user can change.
    let hint = match live.era {
        Some(Era::Modern) => {
            "; try era = \"legacy\" for this server if it pushes in the handshake era"
        }
        _ => "",
    };
    format!("polling{every}: {reason}{hint}")
}

/// A path of the daemon's, or what stands for one a token's view is not told.
fn shown_path(path: Option<&std::path::Path>) -> String {
    match path {
        Some(path) => path.display().to_string(),
        None => "(not shown to this token)".to_string(),
    }
}
