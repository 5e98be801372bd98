//! Newline-delimited JSON-RPC on stdin and stdout, both eras: handshake-era
//! notifications after `initialize`, and `subscriptions/listen` streams as
//! interleaved lines tagged with their subscription id.

use std::io::{BufRead as _, Write as _};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::catalog::PageFault;
use crate::rpc::{self, error_message, parse_message, Incoming, RpcError};
use crate::server::{Era, Push, Reply, Server};
use crate::sse::{maybe_tick, ticker};

/// A line for the stdout writer thread, or the order to exit once earlier lines are out.
enum Outgoing {
    Line(String),
    Exit(i32),
}

/// A `subscriptions/listen` accepted on this process.
struct Listen {
    id: Value,
    wants_list_changed: bool,
    /// What the acknowledgement honoured (tools and prompts list changes among it).
    honoured: Value,
}

/// Serves stdin and stdout until stdin closes.
// Over 100 lines on purpose (test server): the fixture's stdio loop, its reader and writer threads
// and the listens they share, as one loop a scenario's faults read through.
pub async fn serve_stdio(server: Arc<Server>) -> anyhow::Result<()> {
    if let Some(delay) = server.args.start_delay_ms {
        // A slow starter: nothing is read, so nothing is answered, until it is ready.
        info!(
            delay_ms = delay,
            "starting slowly on request of --start-delay-ms"
        );
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    // The crate's tokio has no `io-std` feature, so two plain threads own the
    // blocking stdin and stdout; one writer also keeps lines from interleaving.
    let (outgoing, outgoing_queue) = mpsc::unbounded_channel::<Outgoing>();
    let writer = std::thread::Builder::new()
        .name("stdout-writer".into())
        .spawn(move || write_stdout(outgoing_queue))
        .context("while starting the stdout writer")?;
    let (line_sender, mut lines) = mpsc::channel::<std::io::Result<Vec<u8>>>(64);
    std::thread::Builder::new()
        .name("stdin-reader".into())
        .spawn(move || read_stdin(&line_sender))
        .context("while starting the stdin reader")?;

    // Request tasks hand accepted listens back here, where the list of listens lives.
    let (listen_sender, mut accepted_listens) = mpsc::unbounded_channel::<(Value, Value)>();
    let mut pushes = server.subscribe_pushes();
    let mut pings = server
        .args
        .server_ping_ms
        .map(|period| ticker(Duration::from_millis(period)));
    let mut listens: Vec<Listen> = Vec::new();
    let mut legacy_session = false;
    let send = |line: String| {
        let _ = outgoing.send(Outgoing::Line(line));
    };
    loop {
        tokio::select! {
            line = lines.recv() => {
                let Some(line) = line else {
                    break;
                };
                let line = line.context("while reading stdin")?;
                let trimmed = line.trim_ascii();
                if trimmed.is_empty() {
                    continue;
                }
                match parse_message(trimmed) {
                    Err((id, error)) => send(error_message(id, &error).to_string()),
                    Ok(Incoming::Request { id, method, params }) => {
                        if server.catalog().faults.unanswered_methods.contains(&method) {
                            warn!(method, "leaving a request unanswered on request of the unanswered_methods fault");
                            server.stats.update(|counters| counters.unanswered += 1);
                            continue;
                        }
                        let era = match server.stdio_era(&method, params.as_ref()) {
                            Ok(era) => era,
                            Err(error) => {
                                send(error_message(id, &error).to_string());
                                continue;
                            }
                        };
                        legacy_session |= method == "initialize"
                            && matches!(era, Era::Legacy)
                            && server.args.era != crate::EraChoice::Modern;
                        let server = Arc::clone(&server);
                        let outgoing = outgoing.clone();
                        let listen_sender = listen_sender.clone();
                        // A task per request keeps a slow page from blocking the reader.
                        tokio::spawn(async move {
                            let reply = server.serve(id.clone(), &method, params, &era).await;
                            let item = match reply {
                                Reply::Message { message, .. } => Outgoing::Line(message.to_string()),
                                Reply::Listen { id, honoured } => {
                                    let _ = listen_sender.send((id, honoured));
                                    return;
                                }
                                Reply::Fault(fault) => fault_item(fault, id),
                                Reply::Exit(code) => Outgoing::Exit(code),
                            };
                            let _ = outgoing.send(item);
                        });
                    }
                    Ok(Incoming::Notification { method, params }) => {
                        if method == "notifications/cancelled" {
                            let cancelled = params.as_ref().and_then(|params| params.get("requestId"));
                            let before = listens.len();
                            listens.retain(|listen| Some(&listen.id) != cancelled);
                            close_listens(&server, before - listens.len());
                        }
                        debug!(method, "notification");
                    }
                    Ok(Incoming::Response { id }) => server.count_ping_answer(&id),
                }
            }
            Some((id, honoured)) = accepted_listens.recv() => {
                // The acknowledgement is the first message of the subscription.
                send(rpc::acknowledged(&id, &honoured));
                let wants_list_changed = honoured.get("resourcesListChanged") == Some(&json!(true));
                server.stats.update(|counters| {
                    counters.listens_opened += 1;
                    counters.listens_open += 1;
                    crate::stats::record_now(&mut counters.listens_opened_at_ms);
                });
                info!(%id, "listen opened on stdio");
                if server.catalog().faults.end_listens {
                    // The `end_listens` fault: the result follows the acknowledgement at once.
                    send(rpc::listen_closed(&id));
                    close_listens(&server, 1);
                    continue;
                }
                listens.push(Listen { id, wants_list_changed, honoured });
            }
            push = pushes.recv() => {
                let count = match push {
                    Ok(Push::ListChanged(count)) => count,
                    Ok(Push::EntriesChanged(method)) => {
                        if legacy_session {
                            send(crate::definitions::notification(method, None));
                        }
                        for listen in &listens {
                            if crate::definitions::listen_wants(&listen.honoured, method) {
                                send(crate::definitions::notification(method, Some(&listen.id)));
                            }
                        }
                        continue;
                    }
                    // Missed pushes still mean the list changed; one notification covers them.
                    Err(RecvError::Lagged(_)) => 1,
                    Ok(Push::CloseListens { cancel }) => {
                        for listen in &listens {
                            send(if cancel {
                                rpc::listen_cancelled(&listen.id)
                            } else {
                                rpc::listen_closed(&listen.id)
                            });
                        }
                        close_listens(&server, listens.len());
                        listens.clear();
                        continue;
                    }
                    // stdio has no stream to cut: the drop_streams control is for HTTP.
                    Ok(Push::DropStreams) | Err(RecvError::Closed) => continue,
                };
                let mut sent = 0;
                if legacy_session {
                    for _ in 0..count {
                        send(rpc::list_changed(None));
                    }
                    sent += count;
                }
                for listen in listens.iter().filter(|listen| listen.wants_list_changed) {
                    for _ in 0..count {
                        send(rpc::list_changed(Some(&listen.id)));
                    }
                    sent += count;
                }
                server.count_list_changed(sent);
            }
            () = maybe_tick(&mut pings), if legacy_session => {
                send(server.next_server_ping());
            }
        }
    }
    // Answer the requests still in flight, then exit 0: the writer ends when the last sender drops.
    drop(outgoing);
    let joined = tokio::task::spawn_blocking(move || writer.join()).await;
    if !matches!(joined, Ok(Ok(()))) {
        bail!("the stdout writer failed");
    }
    Ok(())
}

fn close_listens(server: &Server, closed: usize) {
    if closed > 0 {
        server.stats.update(|counters| {
            counters.listens_open = counters.listens_open.saturating_sub(closed as u64);
        });
    }
}

/// How a page fault looks on stdio: an exit, an error, or a line that is not JSON.
fn fault_item(fault: PageFault, id: Value) -> Outgoing {
    match fault {
        PageFault::Drop => {
            warn!("exiting on request of the drop_at_page fault");
            Outgoing::Exit(3)
        }
        PageFault::Http500 => {
            let error = RpcError::new(-32603, "injected internal server error");
            Outgoing::Line(error_message(id, &error).to_string())
        }
        PageFault::Garbage => Outgoing::Line("<html>this is not JSON</html>".to_owned()),
    }
}

/// Forwards stdin line by line until end of file or a read error.
fn read_stdin(lines: &mpsc::Sender<std::io::Result<Vec<u8>>>) {
    let mut stdin = std::io::stdin().lock();
    loop {
        let mut line = Vec::new();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {
                if lines.blocking_send(Ok(line)).is_err() {
                    return;
                }
            }
            Err(error) => {
                let _ = lines.blocking_send(Err(error));
                return;
            }
        }
    }
}

/// Writes queued lines to stdout, flushing each, and exits the process when told to.
fn write_stdout(mut queue: mpsc::UnboundedReceiver<Outgoing>) {
    let mut stdout = std::io::stdout().lock();
    while let Some(item) = queue.blocking_recv() {
        match item {
            Outgoing::Line(line) => {
                if let Err(error) = writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
                    warn!(%error, "cannot write to stdout; dropping further output");
                    return;
                }
            }
            Outgoing::Exit(code) => {
                let _ = stdout.flush();
                std::process::exit(code);
            }
        }
    }
}
