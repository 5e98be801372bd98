//! One socket connection: line framing with a size cap, requests answered in order, and the catalog-change notifications it asked for.

use std::io;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::watch;

use super::dispatch::{answer_method, respond};
use super::readahead::Readahead;
use super::ConnectionState;
use crate::answer::changes::changes_result;
use crate::answer::DaemonContext;
use crate::protocol::lines::{self, Line};
use crate::protocol::{
    CatalogChanged, ErrorObject, IncomingRequest, NotificationMessage, ResourcesListChanged,
    Response, DEFAULT_CHANGES_LIMIT, INVALID_REQUEST, MAX_LINE_BYTES, PARSE_ERROR,
};
use crate::redact;
use crate::store;

pub(super) async fn serve_connection(
    stream: UnixStream,
    context: &Arc<DaemonContext>,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let (read_half, mut write_half) = stream.into_split();
    let mut reader = BufReader::new(read_half);
    let mut line = Vec::new();
    let mut state = ConnectionState {
        local: true,
        ..ConnectionState::default()
    };
    let mut catalog_changes = context.store.subscribe();
    let mut changes_open = true;
    loop {
        let outcome = tokio::select! {
            outcome = lines::read_line(&mut reader, &mut line, MAX_LINE_BYTES) => outcome?,
            event = catalog_changes.recv(), if changes_open => {
                // A burst of swaps is one notification; a client that lagged behind gets one
                // too, like everyone else: list_changed carries nothing, and the feed itself
                // lives in the database.
                let burst = store::drain_changes(event, &mut catalog_changes, |_| true);
                changes_open = !burst.closed;
                if burst.changed {
                    notify_catalog_changed(&mut state, burst.resources, &mut write_half, context)
                        .await?;
                }
                continue;
            }
            _ = shutdown.changed() => return Ok(()),
        };
        let response = match outcome {
            Line::End => return Ok(()),
            Line::TooLong => {
                let response = Response::failure(
                    Value::Null,
                    ErrorObject::new(
                        INVALID_REQUEST,
                        format!(
                            "request line longer than {MAX_LINE_BYTES} bytes; closing the connection"
                        ),
                    ),
                );
                write_message(&mut write_half, &response).await?;
                return Ok(());
            }
            Line::Complete => {
                let blank = line.iter().all(u8::is_ascii_whitespace);
                let response = match blank {
                    true => None,
                    false => handle_line(&line, context, &mut state).await,
                };
                line.clear();
                response
            }
        };
        if let Some(response) = response {
            write_response(&mut write_half, &response).await?;
        }
        if state.watching.is_some() {
            // A new watcher that asked for changes `since` an older point gets them now,
            // after its response; later ones arrive as they are committed.
            send_watched_changes(&mut state, &mut write_half, context).await?;
        }
    }
}

/// Tells this client that the catalog changed, in whichever ways it asked for: an MCP client
/// hears `resources/list_changed` only when resources changed (the mirror's own tools never
/// change with the catalog), a watcher gets every change of every kind.
async fn notify_catalog_changed(
    state: &mut ConnectionState,
    resources_changed: bool,
    writer: &mut OwnedWriteHalf,
    context: &DaemonContext,
) -> io::Result<()> {
    if state.mcp_client && resources_changed {
        let notification = NotificationMessage::new::<ResourcesListChanged>(None);
        write_message(writer, &notification).await?;
    }
    if state.watching.is_some() {
        send_watched_changes(state, writer, context).await?;
    }
    Ok(())
}

/// Sends a watcher every change feed entry after the last one it got, in batches.
async fn send_watched_changes(
    state: &mut ConnectionState,
    writer: &mut OwnedWriteHalf,
    context: &DaemonContext,
) -> io::Result<()> {
    while let Some(since) = state.watching {
        let page = match context
            .store
            .read(move |reader| reader.changes(Some(since), DEFAULT_CHANGES_LIMIT, None))
            .await
        {
            Ok(page) => page,
            Err(error) => {
                tracing::warn!(%error, "cannot read the change feed for a watcher");
                return Ok(());
            }
        };
        let Some(last) = page.changes.last().map(|change| change.seq) else {
            return Ok(());
        };
        let more = page.more;
        let changes = changes_result(page);
        let notification = NotificationMessage::new::<CatalogChanged>(Some(&changes));
        write_message(writer, &notification).await?;
        state.watching = Some(last);
        if !more {
            return Ok(());
        }
    }
    Ok(())
}

/// Writes one message scrubbed, so no configured secret a server echoed (into an error, a walk
/// failure, a read) reaches a client: every notification and error passes here, and every
/// answer with a result passes `write_response`, which scrubs its parts the same way.
async fn write_message(writer: &mut OwnedWriteHalf, message: &impl Serialize) -> io::Result<()> {
    let mut bytes = Vec::new();
    serde_json::to_writer(&mut bytes, message).map_err(io::Error::other)?;
    let text = String::from_utf8(bytes).map_err(io::Error::other)?;
    // Copied only when a secret had to be replaced.
    let scrubbed = match redact::scrub(&text) {
        std::borrow::Cow::Owned(scrubbed) => Some(scrubbed),
        std::borrow::Cow::Borrowed(_) => None,
    };
    let mut text = scrubbed.unwrap_or(text);
    text.push('\n');
    writer.write_all(text.as_bytes()).await
}

/// Writes an answer: one with a result is written around the result's text (scrubbed as
/// `write_message` scrubs), without copying it into a buffer of the whole.
async fn write_response(writer: &mut OwnedWriteHalf, response: &Response) -> io::Result<()> {
    let Some((head, result, tail)) = response.around_result() else {
        return write_message(writer, response).await;
    };
    let (head, result) = (redact::scrub(&head), redact::scrub(result));
    let end = format!("{tail}\n");
    write_parts(
        writer,
        &[head.as_bytes(), result.as_bytes(), end.as_bytes()],
    )
    .await
}

/// Writes `parts` one after the other, in one system call when the socket takes them all (a
/// client woken by the first part of a line would only wait again for the rest).
async fn write_parts(writer: &mut OwnedWriteHalf, parts: &[&[u8]]) -> io::Result<()> {
    let slices: Vec<io::IoSlice<'_>> = parts.iter().map(|part| io::IoSlice::new(part)).collect();
    let mut written = writer.write_vectored(&slices).await?;
    for part in parts {
        if written >= part.len() {
            written -= part.len();
            continue;
        }
        writer.write_all(&part[written..]).await?;
        written = 0;
    }
    Ok(())
}

/// Handles one request line; `None` for notifications, which get no answer.
async fn handle_line(
    line: &[u8],
    context: &Arc<DaemonContext>,
    state: &mut ConnectionState,
) -> Option<Response> {
    let message: Value = match serde_json::from_slice(line) {
        Ok(message) => message,
        Err(error) => {
            return Some(Response::failure(
                Value::Null,
                ErrorObject::new(PARSE_ERROR, format!("parse error: {error}")),
            ))
        }
    };
    // Anything but an object (an array, a number) is not a request: checked like one with
    // every field missing.
    let request = match IncomingRequest::deserialize(message) {
        Ok(request) => request.check(),
        Err(_) => IncomingRequest::default().check(),
    };
    let request = match request {
        Ok(request) => request,
        Err(response) => return Some(*response),
    };
    // Notifications (such as notifications/initialized) need no answer.
    let id = request.id?;
    let read_ahead = match state.readahead.take() {
        Some(readahead) => {
            readahead
                .answer(&request.method, &request.params, context, state)
                .await
        }
        None => None,
    };
    let outcome = match read_ahead {
        Some(outcome) => outcome,
        None => answer_method(&request.method, request.params.clone(), context, state).await,
    };
    state.readahead = Readahead::after(&request.method, &request.params, state, context);
    Some(respond(id, outcome))
}
