//! A connection to the daemon: its Unix socket, or a remote mirror's `/mcp` over Streamable
//! HTTP (`--url`); typed requests, answers and notifications either way.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::ClientError;
use crate::protocol::{
    CatalogChanged, CatalogChanges, CatalogWatch, ChangesParams, Method, Notification, Request,
    ServerMessage, Since, WatchParams, WatchResult,
};

/// How long connecting to a remote mirror may take before it counts as unreachable.
const REMOTE_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often `watch` asks a remote mirror for new changes: HTTP has no socket to push on
/// that carries the change feed, so the feed is polled with `catalog/changes`.
const REMOTE_WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// The most of a refusal's body that an error message quotes.
const MAX_QUOTED_BODY_BYTES: usize = 512;

/// A remote mirror the CLI speaks to instead of the local socket (`--url`, `--token-file`).
pub struct Remote {
    pub url: reqwest::Url,
    pub token: Option<SecretString>,
}

static REMOTE: OnceLock<Remote> = OnceLock::new();

/// Points every client command at `remote` instead of the socket, for the rest of the process.
/// Set once by the binary from the global flags; later calls are ignored.
pub fn use_remote(remote: Remote) {
    let _ = REMOTE.set(remote);
}

/// The remote mirror the commands speak to, when `--url` chose one.
pub fn remote() -> Option<&'static Remote> {
    REMOTE.get()
}

pub struct Client {
    transport: Transport,
    next_id: u64,
}

enum Transport {
    Socket(SocketTransport),
    Http(HttpTransport),
}

struct SocketTransport {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

/// One blocking JSON-RPC exchange per call, each its own POST without a session (the face
/// answers such requests through the socket's dispatch), on a small runtime of its own.
struct HttpTransport {
    remote: &'static Remote,
    runtime: tokio::runtime::Runtime,
    http: reqwest::Client,
    timeout: Option<Duration>,
    /// After `catalog/watch`: the last change sequence handed out, which polling continues from.
    watch_since: Option<i64>,
}

impl Client {
    /// Connects to the socket at `path`, or prepares the remote mirror `--url` chose (a remote
    /// is first contacted by the first call, and is unreachable then if it is).
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let transport = match remote() {
            Some(remote) => Transport::Http(HttpTransport::new(remote)?),
            None => Transport::Socket(SocketTransport::connect(path)?),
        };
        Ok(Client {
            transport,
            next_id: 0,
        })
    }

    /// Sends one request of method `M` and waits for its answer; `timeout` bounds the wait.
    pub fn call<M: Method>(
        &mut self,
        params: &M::Params,
        timeout: Option<Duration>,
    ) -> Result<M::Result, ClientError> {
        self.next_id += 1;
        let request = Request::new::<M>(self.next_id, params);
        let body = serde_json::to_vec(&request)
            .map_err(|error| ClientError::Protocol(error.to_string()))?;
        let answer = match &mut self.transport {
            Transport::Socket(socket) => socket.exchange(body, timeout)?,
            Transport::Http(http) => http.exchange(M::NAME, body, timeout)?,
        };
        let result = result_of::<M>(answer)?;
        if let Transport::Http(http) = &mut self.transport {
            http.note_watch::<M>(params, &result);
        }
        Ok(result)
    }

    /// Bounds how long reading the next message may wait; `None` waits for ever.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), ClientError> {
        match &mut self.transport {
            Transport::Socket(socket) => socket.set_timeout(timeout),
            Transport::Http(http) => {
                http.timeout = timeout;
                Ok(())
            }
        }
    }

    /// The next message the daemon sends, answer or notification. Over HTTP, after
    /// `catalog/watch`, the next batch of changes as a `catalog/changed` notification.
    pub fn next_message(&mut self) -> Result<ServerMessage, ClientError> {
        match &mut self.transport {
            Transport::Socket(socket) => socket.next_message(),
            Transport::Http(http) => {
                let next_id = self.next_id + 1;
                let message = http.next_changes(next_id)?;
                self.next_id = next_id;
                Ok(message)
            }
        }
    }
}

/// The typed result of an answer to `M`, or the error it carries.
fn result_of<M: Method>(answer: ServerMessage) -> Result<M::Result, ClientError> {
    if let Some(error) = answer.error {
        return Err(ClientError::Remote {
            code: error.code,
            message: error.message,
            data: error.data,
        });
    }
    let Some(result) = answer.result else {
        return Err(ClientError::Protocol(format!(
            "the daemon answered {} with neither a result nor an error",
            M::NAME
        )));
    };
    serde_json::from_value(result).map_err(|error| {
        ClientError::Protocol(format!(
            "the daemon's answer to {} has an unexpected shape: {error}",
            M::NAME
        ))
    })
}

impl SocketTransport {
    fn connect(path: &Path) -> Result<SocketTransport, ClientError> {
        let unreachable = |reason: String| ClientError::Unreachable {
            path: path.to_path_buf(),
            reason,
        };
        let stream = UnixStream::connect(path).map_err(|error| unreachable(error.to_string()))?;
        let writer = stream
            .try_clone()
            .map_err(|error| unreachable(error.to_string()))?;
        Ok(SocketTransport {
            path: path.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
        })
    }

    fn lost(&self, error: std::io::Error) -> ClientError {
        ClientError::Unreachable {
            path: self.path.clone(),
            reason: format!("connection lost: {error}"),
        }
    }

    fn exchange(
        &mut self,
        mut line: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<ServerMessage, ClientError> {
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .map_err(|error| self.lost(error))?;
        self.set_timeout(timeout)?;
        // Notifications may come before the answer; requests are answered in order.
        loop {
            let message = self.next_message()?;
            if !message.is_notification() {
                return Ok(message);
            }
        }
    }

    fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), ClientError> {
        self.reader
            .get_ref()
            .set_read_timeout(timeout)
            .map_err(|error| self.lost(error))
    }

    fn next_message(&mut self) -> Result<ServerMessage, ClientError> {
        let mut line = String::new();
        let read = self
            .reader
            .read_line(&mut line)
            .map_err(|error| self.lost(error))?;
        if read == 0 {
            return Err(ClientError::Unreachable {
                path: self.path.clone(),
                reason: "the daemon closed the connection".into(),
            });
        }
        serde_json::from_str(&line).map_err(|error| {
            ClientError::Protocol(format!("the daemon sent an invalid message: {error}"))
        })
    }
}

impl HttpTransport {
    fn new(remote: &'static Remote) -> Result<HttpTransport, ClientError> {
        let setup = |reason: String| ClientError::RemoteUnreachable {
            url: remote.url.to_string(),
            reason,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| setup(format!("cannot start the HTTP client: {error}")))?;
        let http = reqwest::Client::builder()
            .connect_timeout(REMOTE_CONNECT_TIMEOUT)
            .user_agent(concat!("mcp-mirror/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| setup(format!("cannot start the HTTP client: {error}")))?;
        Ok(HttpTransport {
            remote,
            runtime,
            http,
            timeout: None,
            watch_since: None,
        })
    }

    fn unreachable(&self, reason: String) -> ClientError {
        ClientError::RemoteUnreachable {
            url: self.remote.url.to_string(),
            reason,
        }
    }

    /// POSTs one JSON-RPC request and reads its answer (JSON, or the matching event of a stream).
    fn exchange(
        &self,
        method: &str,
        body: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<ServerMessage, ClientError> {
        let mut request = self
            .http
            .post(self.remote.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .body(body);
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        if let Some(token) = &self.remote.token {
            request = request.bearer_auth(token.expose_secret());
        }
        let (status, is_stream, text) = self
            .runtime
            .block_on(async {
                let response = request.send().await?;
                let status = response.status();
                let is_stream = response
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|value| value.to_str().ok())
                    .is_some_and(|value| value.starts_with("text/event-stream"));
                let text = response.text().await?;
                Ok::<_, reqwest::Error>((status, is_stream, text))
            })
            .map_err(|error| self.unreachable(describe_request_error(&error)))?;
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return Err(ClientError::Unauthorized {
                url: self.remote.url.to_string(),
                reason: if self.remote.token.is_some() {
                    "it refused the token (HTTP 401): the token is wrong; check --token-file"
                } else {
                    "it needs a token (HTTP 401): pass --token-file PATH (or MCP_MIRROR_TOKEN_FILE)"
                }
                .into(),
            });
        }
        let message = if is_stream {
            answer_in_stream(&text)
        } else {
            serde_json::from_str::<ServerMessage>(&text).ok()
        };
        match message {
            // Errors in JSON-RPC come with 4xx statuses too (a bad header, a body too large).
            Some(message) if message.result.is_some() || message.error.is_some() => Ok(message),
            _ if status == reqwest::StatusCode::NOT_FOUND => Err(self.unreachable(format!(
                "HTTP 404 for {method}: no MCP endpoint there (the HTTP face serves /mcp)"
            ))),
            _ if !status.is_success() => Err(self.unreachable(format!(
                "HTTP {status} for {method}: {}",
                quoted_body(&text)
            ))),
            _ => Err(ClientError::Protocol(format!(
                "the mirror at {} answered {method} with something that is not a JSON-RPC answer: {}",
                self.remote.url,
                quoted_body(&text)
            ))),
        }
    }

    /// Remembers where a `catalog/watch` left the feed, so `next_changes` polls on from there.
    fn note_watch<M: Method>(&mut self, params: &M::Params, result: &M::Result) {
        if M::NAME != CatalogWatch::NAME {
            return;
        }
        let asked = serde_json::to_value(params)
            .ok()
            .and_then(|params| serde_json::from_value::<WatchParams>(params).ok())
            .and_then(|params| params.since);
        let Some(result) = serde_json::to_value(result)
            .ok()
            .and_then(|result| serde_json::from_value::<WatchResult>(result).ok())
        else {
            return;
        };
        // A sequence number or none means the same to every daemon; a time only the daemon
        // resolves (to `sinceSeq`).
        let since = match asked {
            None => result.latest_seq,
            Some(Since::Sequence(sequence)) => sequence,
            Some(Since::Time(_)) => result.since_seq,
        };
        self.watch_since = Some(since);
    }

    /// Polls `catalog/changes` until the feed moves past `watch_since`, and hands the new
    /// changes out as the `catalog/changed` notification the socket would have pushed.
    fn next_changes(&mut self, id: u64) -> Result<ServerMessage, ClientError> {
        let Some(mut since) = self.watch_since else {
            return Err(ClientError::Protocol(
                "over HTTP, the mirror sends nothing unasked; call catalog/watch first".into(),
            ));
        };
        loop {
            let params = ChangesParams::after(since, None);
            let request = Request::new::<CatalogChanges>(id, &params);
            let body = serde_json::to_vec(&request)
                .map_err(|error| ClientError::Protocol(error.to_string()))?;
            let answer =
                self.exchange(CatalogChanges::NAME, body, Some(Duration::from_secs(30)))?;
            let changes = result_of::<CatalogChanges>(answer)?;
            if let Some(last) = changes.changes.last() {
                since = last.seq;
            }
            self.watch_since = Some(since);
            if !changes.changes.is_empty() || changes.truncated {
                let params = serde_json::to_value(&changes)
                    .map_err(|error| ClientError::Protocol(error.to_string()))?;
                return Ok(ServerMessage {
                    method: Some(CatalogChanged::NAME.to_string()),
                    params: Some(params),
                    result: None,
                    error: None,
                });
            }
            if !changes.more {
                std::thread::sleep(REMOTE_WATCH_INTERVAL);
            }
        }
    }
}

/// The first JSON-RPC answer among the `data:` lines of an event stream.
fn answer_in_stream(text: &str) -> Option<ServerMessage> {
    let mut data = String::new();
    for line in text.lines().chain(std::iter::once("")) {
        if let Some(rest) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        } else if line.is_empty() && !data.is_empty() {
            if let Ok(message) = serde_json::from_str::<ServerMessage>(&data) {
                if message.result.is_some() || message.error.is_some() {
                    return Some(message);
                }
            }
            data.clear();
        }
    }
    None
}

/// Why a request did not get an answer, in words (reqwest's display hides the cause).
fn describe_request_error(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "no answer in time".to_string()
    } else if error.is_connect() {
        "cannot connect".to_string()
    } else {
        error.to_string()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// The start of a body quoted in an error, on one line.
fn quoted_body(text: &str) -> String {
    let text = text.trim();
    let quoted = crate::protocol::cut_at_char_boundary(text, MAX_QUOTED_BODY_BYTES)
        .replace(['\n', '\r'], " ");
    if quoted.is_empty() {
        "an empty body".into()
    } else {
        quoted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_found_among_stream_events() {
        let text = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}\n\n";
        let answer = answer_in_stream(text).expect("an answer");
        assert_eq!(answer.result, Some(serde_json::json!({"ok": true})));
        assert!(answer_in_stream("event: message\ndata: not json\n\n").is_none());
    }

    #[test]
    fn quoted_bodies_are_bounded_and_on_one_line() {
        assert_eq!(quoted_body("  a\nb \n"), "a b");
        assert_eq!(quoted_body(""), "an empty body");
        assert_eq!(quoted_body(&"é".repeat(1000)).len(), MAX_QUOTED_BODY_BYTES);
    }
}
