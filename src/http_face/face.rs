//! `HttpFace`: the HTTP face's state, `bind` and `serve` (the accept loop with per-peer limits) and `/metrics`.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use super::access;
use super::endpoint;
use super::face_state::{HttpFace, PeerAddress};
use super::limits;
use super::limits::Refusal;
use super::limits::REFUSAL_LOG_INTERVAL;
use super::stall;

/// The largest request head (request line and headers) a client may send.
pub const MAX_HEADER_BYTES: usize = 64 << 10;
/// How long a client may take to send a request head (a slow client holds one task only).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections get to finish at shutdown.
const CONNECTION_STOP_BOUND: Duration = Duration::from_secs(2);
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {address} for the HTTP face: {source}")]
pub struct HttpBindError {
    pub address: SocketAddr,
    pub source: std::io::Error,
}

impl HttpFace {
    fn router(self: &Arc<Self>, face: Face) -> Router {
        let router = Router::new().route("/metrics", get(metrics));
        let router = match face {
            Face::Mcp => router.route(
                "/mcp",
                get(endpoint::get_stream)
                    .post(endpoint::post_message)
                    .delete(endpoint::delete_session),
            ),
            Face::MetricsOnly => router,
        };
        router.with_state(self.clone())
    }
}

/// What a listener serves: `/mcp` and `/metrics`, or `/metrics` alone (`metrics_listen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Face {
    Mcp,
    MetricsOnly,
}

/// `GET /metrics`: the Prometheus text format, from the same status `catalog/status` answers.
async fn metrics(
    State(face): State<Arc<HttpFace>>,
    Extension(PeerAddress(peer)): Extension<PeerAddress>,
    headers: HeaderMap,
) -> Response {
    let client = match access::admit(&face, peer, &headers) {
        Ok(client) => client,
        Err(refusal) => return *refusal,
    };
    tracing::debug!(token = client.name(), "metrics scraped");
    // The scraper's view, as `catalog/status` gives it: a token hears nothing of a server
    // outside its view (not even its name).
    let view = face.view_of(&client).await;
    match crate::answer::status::status(&face.api).await {
        Ok(mut status) => {
            crate::metrics::forget_removed_servers(&status);
            crate::answer::status::restrict(&mut status, &view);
            let connections = crate::metrics::HttpConnections {
                open: face.clients(),
                largest_peer: face.peer_connections.largest(),
            };
            let text = crate::metrics::render(&status, connections);
            let mut response = (StatusCode::OK, text).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
            );
            response
        }
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the status: {}\n", error.message),
        )
            .into_response(),
    }
}

/// Binds the face's address; a failure stops the daemon at start, naming the address.
pub async fn bind(address: SocketAddr) -> Result<TcpListener, HttpBindError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| HttpBindError { address, source })
}

/// Accepts connections until shutdown; each is served by its own task with hyper's http1
/// server, whose buffer bound caps the request head.
pub async fn serve(face: Arc<HttpFace>, listener: TcpListener, serving: Face) {
    let router = face.router(serving);
    let mut shutdown = face.shutdown.clone();
    // The last refusals of a flood are said once their interval has passed, flood or not.
    let mut say_refusals = tokio::time::interval(REFUSAL_LOG_INTERVAL);
    say_refusals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let permit = loop {
            tokio::select! {
                permit = face.connections.clone().acquire_owned() => match permit {
                    Ok(permit) => break permit,
                    Err(_) => return,
                },
                _ = say_refusals.tick() => face.refusals.flush(),
                _ = shutdown.changed() => return,
            }
        };
        let (mut stream, peer) = loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => break accepted,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed on the HTTP face");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = say_refusals.tick() => face.refusals.flush(),
                _ = shutdown.changed() => return,
            }
        };
        // One peer holds at most its share of the connections, so it cannot hold them all;
        // past it the connection is told so and closed at once (its permit goes back).
        let peer_key = limits::peer_key(peer.ip());
        let Some(peer_share) = face
            .peer_connections
            .try_take(&peer_key, face.config.max_connections_per_peer)
        else {
            face.refusals.refused(Refusal::PeerConnections);
            refuse_connection(&mut stream, face.config.max_connections_per_peer);
            continue;
        };
        // An answer goes out as it is written: without TCP_NODELAY, a body written after its
        // head waits for the client's (delayed, up to 40 ms) ACK of the head.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, %peer, "cannot set TCP_NODELAY");
        }
        let service =
            TowerToHyperService::new(router.clone().layer(Extension(PeerAddress(peer.ip()))));
        let face = face.clone();
        let mut stop = face.shutdown.clone();
        tokio::spawn(async move {
            face.clients.fetch_add(1, Ordering::Relaxed);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .max_buf_size(MAX_HEADER_BYTES)
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let stream = stall::StallGuarded::new(stream, face.config.write_stall_timeout);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let outcome = tokio::select! {
                outcome = connection.as_mut() => outcome,
                _ = stop.changed() => {
                    connection.as_mut().graceful_shutdown();
                    tokio::time::timeout(CONNECTION_STOP_BOUND, connection.as_mut())
                        .await
                        .unwrap_or(Ok(()))
                }
            };
            if let Err(error) = outcome {
                tracing::debug!(%error, %peer, "HTTP connection ended with an error");
            }
            face.clients.fetch_sub(1, Ordering::Relaxed);
            drop(peer_share);
            drop(permit);
        });
    }
}

/// Tells a connection past its peer's share why it is closed, without waiting for it: the
/// answer goes into the socket's send buffer or nowhere.
fn refuse_connection(stream: &mut tokio::net::TcpStream, per_peer: usize) {
    let body = format!(
        "too many connections from your address ([http] max_connections_per_peer = {per_peer})\n"
    );
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}
