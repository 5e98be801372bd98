//! Who may use the HTTP face: browser `Origin`s (DNS rebinding) and bearer tokens compared in
//! constant time; a refusal is a 403 or a 401 with `WWW-Authenticate`.

use std::net::IpAddr;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use secrecy::ExposeSecret;
use subtle::ConstantTimeEq;

use super::HttpFace;

/// The client a request comes from, as far as the log, the sharing rules and the search gate
/// care.
#[derive(Debug, Clone)]
pub(super) struct Client {
    /// The name of the token it presented; `None` when the face has no tokens (loopback only).
    pub token: Option<String>,
    /// The address the connection comes from.
    pub address: IpAddr,
}

/// Whose share of the search gate a request's searches use: every request of one identity is
/// one client of the gate, as a socket connection is.
///
/// The token when the face has tokens: a client cannot make new ones, and whoever holds one
/// token is one principal. Else the peer's address, without the port: a new connection (a
/// new port) or a new `Mcp-Session-Id` (minted by any `initialize`; the 2026-07-28 era has
/// none) costs nothing, so neither may start a fresh share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum SearchIdentity {
    Token(String),
    Address(IpAddr),
}

impl Client {
    /// The name the log shows: the token's name, never its value.
    pub fn name(&self) -> &str {
        self.token.as_deref().unwrap_or("-")
    }

    pub fn search_identity(&self) -> SearchIdentity {
        match &self.token {
            Some(name) => SearchIdentity::Token(name.clone()),
            // An IPv4 client reached over an IPv6 socket is the same client.
            None => SearchIdentity::Address(self.address.to_canonical()),
        }
    }
}

/// Checks the `Origin` and the bearer token; the answer to send when the request is refused.
pub(super) fn admit(
    face: &HttpFace,
    address: IpAddr,
    headers: &HeaderMap,
) -> Result<Client, Box<Response>> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("").trim_end_matches('/');
        let allowed = face
            .config
            .allowed_origins
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(origin));
        if !allowed {
            tracing::info!(
                origin,
                "HTTP request refused: origin not in [http] allowed_origins"
            );
            return Err(Box::new(
                (StatusCode::FORBIDDEN, "origin not allowed\n").into_response(),
            ));
        }
    }
    if face.config.tokens.is_empty() {
        return Ok(Client {
            token: None,
            address,
        });
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    let Some(presented) = presented else {
        tracing::info!("HTTP request refused: no bearer token");
        return Err(Box::new(unauthorized(None)));
    };
    // Every token is compared, so the time taken does not say which one nearly matched.
    let mut matched = None;
    for token in &face.config.tokens {
        let equal = token
            .value
            .expose_secret()
            .as_bytes()
            .ct_eq(presented.as_bytes());
        if bool::from(equal) {
            matched = Some(token.name.clone());
        }
    }
    match matched {
        Some(name) => Ok(Client {
            token: Some(name),
            address,
        }),
        None => {
            tracing::info!("HTTP request refused: unknown bearer token");
            Err(Box::new(unauthorized(Some("invalid_token"))))
        }
    }
}

fn unauthorized(error: Option<&str>) -> Response {
    let challenge = match error {
        Some(error) => format!("Bearer realm=\"mcp-mirror\", error=\"{error}\""),
        None => "Bearer realm=\"mcp-mirror\"".to_string(),
    };
    let mut response =
        (StatusCode::UNAUTHORIZED, "a valid bearer token is needed\n").into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}
