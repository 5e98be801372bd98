//! What an HTTP failure says: the status with the server's `Retry-After` and a bounded,
//! shortened part of its body, and a reqwest error described by its cause.

use std::time::Duration;

use reqwest::header::RETRY_AFTER;
use reqwest::StatusCode;
use serde_json::Value;

use crate::upstream::backoff::parse_retry_after;
use crate::upstream::rpc::{self, Incoming};
use crate::upstream::McpError;

/// How much of an error body we read at most.
const ERROR_BODY_READ_LIMIT: usize = 8 << 10;
/// How much of an error body we keep for status and logs.
const ERROR_BODY_LIMIT: usize = 300;

/// The `Retry-After` of a 429 or 503 answer, the only ones where we honour it.
pub(super) fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    if !matches!(
        response.status(),
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        return None;
    }
    let value = response.headers().get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, std::time::SystemTime::now())
}

/// Turns a failed HTTP answer into an error; a lost session is told apart, and a JSON-RPC
/// error in the body keeps its code (the stateless era's header errors come as HTTP 400).
pub(super) fn http_error(
    status: StatusCode,
    body: &str,
    had_session: bool,
    retry_after: Option<Duration>,
) -> McpError {
    let lowered = body.to_ascii_lowercase();
    let mentions_session = lowered.contains("session");
    if had_session
        && (status == StatusCode::NOT_FOUND
            || (matches!(status, StatusCode::BAD_REQUEST | StatusCode::UNAUTHORIZED)
                && mentions_session))
    {
        return McpError::SessionExpired(format!("HTTP {}: {}", status.as_u16(), shorten(body)));
    }
    // "Come back later" is about the server's load, whatever its body says.
    let busy = matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    );
    let message = (!busy)
        .then(|| serde_json::from_str::<Value>(body).ok())
        .flatten();
    if let Some(message) = message {
        if let Some(Incoming::Response {
            outcome: Err(error),
            ..
        }) = rpc::classify(message)
        {
            return McpError::Rpc {
                method: String::new(),
                error,
            };
        }
    }
    McpError::Http {
        status: status.as_u16(),
        body: shorten(body),
        retry_after,
    }
}

/// The start of an error answer's body: enough to explain, never more than a few KiB, and
/// never waiting long (a server may send an endless body).
pub async fn error_body(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let reading = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            body.extend_from_slice(&chunk);
            if body.len() >= ERROR_BODY_READ_LIMIT {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), reading).await;
    body.truncate(ERROR_BODY_READ_LIMIT);
    String::from_utf8_lossy(&body).into_owned()
}

pub fn shorten(text: &str) -> String {
    let text = text.trim();
    if text.len() <= ERROR_BODY_LIMIT {
        return text.to_string();
    }
    format!(
        "{}…",
        crate::protocol::cut_at_char_boundary(text, ERROR_BODY_LIMIT)
    )
}

/// Describes a reqwest error without its URL query (which may hold a secret someone put there).
pub fn describe_reqwest_error(url: &str, error: &reqwest::Error) -> String {
    let base = url.split('?').next().unwrap_or(url);
    let kind = if error.is_connect() {
        "cannot connect to"
    } else if error.is_timeout() {
        "timed out talking to"
    } else {
        "request failed to"
    };
    let mut detail = String::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        detail = cause.to_string();
        source = cause.source();
    }
    if detail.is_empty() {
        format!("{kind} {base}")
    } else {
        format!("{kind} {base}: {detail}")
    }
}
