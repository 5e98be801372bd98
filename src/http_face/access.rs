//! Who may use the HTTP face: the `Host` a request names and browser `Origin`s (DNS
//! rebinding), and bearer tokens compared in constant time; a refusal is a 421, a 403 or a 401
//! with `WWW-Authenticate`, said in the log once per interval with a count.

use std::net::IpAddr;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use secrecy::ExposeSecret;
use subtle::ConstantTimeEq;

use super::face_state::HttpFace;
use super::limits::{peer_key, ClientIdentity, ClientKey, Refusal};

/// The client a request comes from, as far as the log, the sharing rules and the search gate
/// care.
#[derive(Debug, Clone)]
pub(super) struct Client {
    /// The name of the token it presented; `None` when the face has no tokens (loopback only).
    pub token: Option<String>,
    /// The address the connection comes from.
    pub address: IpAddr,
}

impl Client {
    /// The name the log shows: the token's name, never its value.
    pub fn name(&self) -> &str {
        self.token.as_deref().unwrap_or("-")
    }

    /// Whose share of sessions and streams this request uses.
    pub fn key(&self) -> ClientKey {
        ClientKey {
            token: self.token.clone(),
            peer: peer_key(self.address),
        }
    }

    pub fn identity(&self) -> ClientIdentity {
        match &self.token {
            Some(name) => ClientIdentity::Token(name.clone()),
            // An IPv4 client reached over an IPv6 socket is the same client.
            None => ClientIdentity::Address(self.address.to_canonical()),
        }
    }
}

/// Whether a request's `Host` may reach the face. A page of a name that DNS rebinding pointed
/// at us sends that name: only IP addresses (a page there is of our own origin), `localhost`
/// (browsers resolve it themselves) and the names in `[http] allowed_hosts` pass. A face with
/// tokens and no `allowed_hosts` takes any name: such a page cannot present a token it does
/// not know. The port is not compared; a request without `Host` (HTTP/1.0) is no browser's.
fn host_allowed(face: &HttpFace, headers: &HeaderMap) -> bool {
    let config = &face.config;
    if !config.tokens.is_empty() && config.allowed_hosts.is_empty() {
        return true;
    }
    let Some(host) = headers.get(header::HOST) else {
        return true;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let host = host.trim();
    // `[v6]:port`, `[v6]`, `name:port`, `v4:port`, `name`.
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((inside, _)) => return inside.parse::<std::net::Ipv6Addr>().is_ok(),
            None => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<IpAddr>().is_ok() || name == "localhost" || config.allowed_hosts.contains(&name)
}

/// Checks the `Host`, the `Origin` and the bearer token; the answer to send when the request
/// is refused.
pub(super) fn admit(
    face: &HttpFace,
    address: IpAddr,
    headers: &HeaderMap,
) -> Result<Client, Box<Response>> {
    if !host_allowed(face, headers) {
        face.refusals.refused(Refusal::Host);
        return Err(Box::new(
            (
                StatusCode::MISDIRECTED_REQUEST,
                "this Host is not served here: use an IP address, localhost or a name in [http] allowed_hosts\n",
            )
                .into_response(),
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("").trim_end_matches('/');
        let allowed = face
            .config
            .allowed_origins
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(origin));
        if !allowed {
            face.refusals.refused(Refusal::Origin);
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
        face.refusals.refused(Refusal::NoToken);
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
            face.refusals.refused(Refusal::UnknownToken);
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
