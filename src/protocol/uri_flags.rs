//! Which listed URIs point at the local machine or a private network, told from the URI's text
//! alone (no DNS lookup): the flags every entry carries in `_meta` under `URI_FLAGS_META_KEY`.
//!
//! The mirror never follows a URI itself (reads go to the origin server), but an agent that
//! follows one directly may reach `file:///etc/shadow`, a cloud metadata address or an admin
//! page on localhost. Hosts are read as the URL parsers agents use read them: IPv4 in any of
//! `inet_aton`'s forms (`2130706433`, `0177.0.0.1`, `0x7f.1`), IPv6 with an IPv4 inside
//! (`[::ffff:127.0.0.1]`), percent-encoded or full-width characters, a trailing dot.

use std::net::{Ipv4Addr, Ipv6Addr};

/// The `_meta` key of an entry's URI flags (absent when it has none).
pub const URI_FLAGS_META_KEY: &str = "io.mcp-mirror/uri";

/// What a URI points at, as far as its text tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UriFlag {
    /// `file:` (any form): a file on the machine that opens it.
    LocalFile,
    /// A scheme that reaches no named host: a local socket, an archive, a page in the client.
    NonNetworkScheme,
    /// This machine: 127.0.0.0/8, 0.0.0.0/8, `::1`, `::`, `localhost` and `*.localhost`.
    Loopback,
    /// 169.254.0.0/16 (cloud metadata services live there) and fe80::/10.
    LinkLocal,
    /// RFC 1918, 100.64.0.0/10, fc00::/7, fec0::/10, and names only a private network resolves.
    PrivateNetwork,
}

impl UriFlag {
    /// The flag's text in `_meta`, in filters and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            UriFlag::LocalFile => "local-file",
            UriFlag::NonNetworkScheme => "non-network-scheme",
            UriFlag::Loopback => "loopback",
            UriFlag::LinkLocal => "link-local",
            UriFlag::PrivateNetwork => "private-network",
        }
    }

    /// Every flag, for help texts and filters.
    pub const ALL: [UriFlag; 5] = [
        UriFlag::LocalFile,
        UriFlag::NonNetworkScheme,
        UriFlag::Loopback,
        UriFlag::LinkLocal,
        UriFlag::PrivateNetwork,
    ];
}

/// Schemes that name no host to reach: what they open is on the machine that follows them.
const NON_NETWORK_SCHEMES: &[&str] = &[
    "unix",
    "npipe",
    "pipe",
    "jar",
    "javascript",
    "data",
    "blob",
    "about",
    "chrome",
    "view-source",
];

/// Schemes where a name without a dot, or under a special-use suffix, is a private host (for
/// other schemes the authority is often a plain word: `fixture://docs/…`).
const NETWORK_SCHEMES: &[&str] = &[
    "http",
    "https",
    "ws",
    "wss",
    "ftp",
    "ftps",
    "sftp",
    "ssh",
    "git",
    "smb",
    "ldap",
    "ldaps",
    "redis",
    "postgres",
    "postgresql",
    "mysql",
    "mongodb",
];

/// Name suffixes that only a private network resolves.
const PRIVATE_SUFFIXES: &[&str] = &[".local", ".internal", ".lan", ".home.arpa", ".intranet"];

/// The longest URI looked at; a longer one is judged by its first bytes (its scheme and host
/// come first).
const MAX_URI_BYTES: usize = 4096;

/// The flags of a listed URI, sorted, none for an ordinary public one.
pub fn classify(uri: &str) -> Vec<UriFlag> {
    let uri = super::cut_at_char_boundary(uri.trim_start(), MAX_URI_BYTES);
    let Some((scheme, rest)) = uri.split_once(':') else {
        return Vec::new();
    };
    let valid_scheme = !scheme.is_empty()
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid_scheme {
        return Vec::new();
    }
    let scheme = scheme.to_ascii_lowercase();
    let mut flags = Vec::new();
    if scheme == "file" || rest.to_ascii_lowercase().starts_with("file:") {
        flags.push(UriFlag::LocalFile);
    }
    if NON_NETWORK_SCHEMES.contains(&scheme.as_str()) {
        flags.push(UriFlag::NonNetworkScheme);
    }
    if let Some(host) = host_of(&scheme, rest) {
        let network = scheme == "file" || NETWORK_SCHEMES.contains(&scheme.as_str());
        if let Some(flag) = classify_host(&host, network) {
            flags.push(flag);
        }
    }
    flags.sort();
    flags.dedup();
    flags
}

/// The flags of one listing of `kind` keyed by `identity` (a resource's URI, a template's
/// `uriTemplate`, read at its expansion base); tools and prompts have none.
pub fn flags_of_listing(kind: super::Kind, identity: &str) -> Vec<UriFlag> {
    match kind {
        super::Kind::Resource => classify(identity),
        super::Kind::Template => classify(template_base(identity)),
        super::Kind::Tool | super::Kind::Prompt => Vec::new(),
    }
}

/// One value of a search's `uriFlags` filter: the entries carrying a flag, or (`none`) the
/// entries carrying none (tools and prompts among them).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub enum UriFlagFilter {
    Flagged(UriFlag),
    Unflagged,
}

impl UriFlagFilter {
    /// Whether an entry carrying `flags` passes a filter of `filters` (any of them matches).
    pub fn keeps(filters: &std::collections::BTreeSet<UriFlagFilter>, flags: &[UriFlag]) -> bool {
        filters.iter().any(|filter| match filter {
            UriFlagFilter::Flagged(flag) => flags.contains(flag),
            UriFlagFilter::Unflagged => flags.is_empty(),
        })
    }
}

impl std::str::FromStr for UriFlagFilter {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "none" {
            return Ok(UriFlagFilter::Unflagged);
        }
        UriFlag::ALL
            .into_iter()
            .find(|flag| flag.as_str() == text)
            .map(UriFlagFilter::Flagged)
            .ok_or_else(|| {
                let known: Vec<&str> = UriFlag::ALL.iter().map(|flag| flag.as_str()).collect();
                format!("unknown URI flag (known: {}, none)", known.join(", "))
            })
    }
}

impl TryFrom<String> for UriFlagFilter {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<UriFlagFilter> for String {
    fn from(filter: UriFlagFilter) -> String {
        match filter {
            UriFlagFilter::Flagged(flag) => flag.as_str().into(),
            UriFlagFilter::Unflagged => "none".into(),
        }
    }
}

/// The expansion base of a URI template: its text before the first expression, which is all
/// of the URI every expansion shares (`http://10.0.0.5/{path}` → `http://10.0.0.5/`).
pub fn template_base(uri_template: &str) -> &str {
    uri_template
        .split_once('{')
        .map_or(uri_template, |(base, _)| base)
}

/// The host of `rest` (the URI after `scheme:`), decoded and lowercased; `None` without an
/// authority. Special schemes take `\` for `/` and any number of slashes, as browsers do.
fn host_of(scheme: &str, rest: &str) -> Option<String> {
    // `file:` has an authority only after `//` (`file:///etc` has an empty one).
    let special = matches!(scheme, "http" | "https" | "ws" | "wss" | "ftp");
    let authority_start = if special {
        rest.trim_start_matches(['/', '\\'])
    } else {
        rest.strip_prefix("//")?
    };
    let end = authority_start
        .find(|c: char| matches!(c, '/' | '?' | '#') || (special && c == '\\'))
        .unwrap_or(authority_start.len());
    let authority = &authority_start[..end];
    let host_and_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = if host_and_port.starts_with('[') {
        host_and_port
            .find(']')
            .map_or(host_and_port, |close| &host_and_port[..=close])
    } else {
        host_and_port
            .rsplit_once(':')
            .map_or(host_and_port, |(host, _)| host)
    };
    let host = normalize(&percent_decode(host));
    (!host.is_empty()).then_some(host)
}

/// Percent-decoding, as URL parsers do to a host before reading it; invalid escapes stay.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|byte| (*byte as char).to_digit(16));
        match (bytes[index], hex(index + 1), hex(index + 2)) {
            (b'%', Some(high), Some(low)) => {
                decoded.push((high * 16 + low) as u8);
                index += 3;
            }
            (byte, _, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// Full-width forms and ideographic full stops to ASCII (IDNA maps them so), lowercase, and no
/// trailing dot.
fn normalize(host: &str) -> String {
    let mapped: String = host
        .chars()
        .map(|c| match c {
            '\u{3002}' | '\u{ff0e}' | '\u{ff61}' => '.',
            '\u{ff01}'..='\u{ff5e}' => char::from_u32(c as u32 - 0xfee0).unwrap_or(c),
            other => other,
        })
        .collect::<String>()
        .to_lowercase();
    mapped.strip_suffix('.').unwrap_or(&mapped).to_string()
}

/// A host's flag: an IP literal, or a name that only this machine or a private network
/// resolves (`network`: the scheme reaches hosts by name, so plain words and every IPv4 form
/// count).
fn classify_host(host: &str, network: bool) -> Option<UriFlag> {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        // A zone (`fe80::1%25eth0`, decoded to `%eth0`) is not part of the address.
        let address = inner.split('%').next().unwrap_or(inner);
        return address.parse::<Ipv6Addr>().ok().and_then(classify_ipv6);
    }
    // Other schemes' authorities are often plain words or numbers (`ticket://12345`): only
    // the dotted quad counts there; network schemes take every form a resolver reads.
    let address = match network {
        true => parse_ipv4(host),
        false => host.parse::<Ipv4Addr>().ok(),
    };
    if let Some(address) = address {
        return classify_ipv4(address);
    }
    if host == "localhost" || host.ends_with(".localhost") || host == "localhost.localdomain" {
        return Some(UriFlag::Loopback);
    }
    let private_name =
        PRIVATE_SUFFIXES.iter().any(|suffix| host.ends_with(suffix)) || !host.contains('.');
    (network && private_name).then_some(UriFlag::PrivateNetwork)
}

/// IPv4 as `inet_aton` reads it: one to four parts, each decimal, octal (leading 0) or hex
/// (0x), the last filling the bytes left (`127.1`, `2130706433`, `0x7f000001`).
fn parse_ipv4(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        let (digits, radix) =
            if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
                (hex, 16)
            } else if part.len() > 1 && part.starts_with('0') {
                (&part[1..], 8)
            } else {
                (*part, 10)
            };
        if digits.is_empty() && radix == 16 {
            numbers.push(0u64);
            continue;
        }
        if digits.is_empty() || digits.len() > 32 {
            return None;
        }
        numbers.push(u64::from_str_radix(digits, radix).ok()?);
    }
    let (last, leading) = numbers.split_last()?;
    if leading.iter().any(|number| *number > 255) {
        return None;
    }
    let room = 8 * (4 - leading.len() as u32);
    if *last >= 1u64 << room {
        return None;
    }
    let mut value: u64 = 0;
    for (index, number) in leading.iter().enumerate() {
        value |= number << (24 - 8 * index as u32);
    }
    Some(Ipv4Addr::from((value | last) as u32))
}

fn classify_ipv4(address: Ipv4Addr) -> Option<UriFlag> {
    let [first, second, ..] = address.octets();
    match (first, second) {
        (127, _) | (0, _) => Some(UriFlag::Loopback),
        (169, 254) => Some(UriFlag::LinkLocal),
        (10, _) | (192, 168) => Some(UriFlag::PrivateNetwork),
        (172, 16..=31) | (100, 64..=127) => Some(UriFlag::PrivateNetwork),
        _ => None,
    }
}

fn classify_ipv6(address: Ipv6Addr) -> Option<UriFlag> {
    let segments = address.segments();
    if address.is_loopback() || address.is_unspecified() {
        return Some(UriFlag::Loopback);
    }
    // An IPv4 address inside: mapped (::ffff:a.b.c.d), compatible (::a.b.c.d), NAT64
    // (64:ff9b::a.b.c.d), and 6to4 (2002:aabb:ccdd::) reach that IPv4 host.
    let [a, b, c, d, e, f, g, h] = segments;
    let embedded = match (a, b, c, d, e, f) {
        (0, 0, 0, 0, 0, 0xffff) | (0, 0, 0, 0, 0, 0) | (0x64, 0xff9b, 0, 0, 0, 0) => Some(
            Ipv4Addr::new((g >> 8) as u8, g as u8, (h >> 8) as u8, h as u8),
        ),
        (0x2002, ..) => Some(Ipv4Addr::new(
            (b >> 8) as u8,
            b as u8,
            (c >> 8) as u8,
            c as u8,
        )),
        _ => None,
    };
    if let Some(inner) = embedded {
        return classify_ipv4(inner);
    }
    match a {
        0xfe80..=0xfebf => Some(UriFlag::LinkLocal),
        0xfec0..=0xfeff | 0xfc00..=0xfdff => Some(UriFlag::PrivateNetwork),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use UriFlag::*;

    #[test]
    fn hostile_uris_are_flagged() {
        let table: &[(&str, &[UriFlag])] = &[
            ("file:///etc/shadow", &[LocalFile]),
            ("FILE:///etc/passwd", &[LocalFile]),
            ("file://localhost/etc/shadow", &[LocalFile, Loopback]),
            ("file:/etc/shadow", &[LocalFile]),
            ("file:etc/shadow", &[LocalFile]),
            ("file://server.internal/share", &[LocalFile, PrivateNetwork]),
            (
                "jar:file:///opt/app.jar!/config",
                &[LocalFile, NonNetworkScheme],
            ),
            ("http://127.0.0.1/", &[Loopback]),
            ("http://127.1/", &[Loopback]),
            ("http://2130706433/", &[Loopback]),
            ("http://0177.0.0.1/", &[Loopback]),
            ("http://0x7f.0.0.1/", &[Loopback]),
            ("http://0x7f000001/", &[Loopback]),
            ("http://017700000001/", &[Loopback]),
            ("http://127.0.0.1.:8080/admin", &[Loopback]),
            ("http://%31%32%37.0.0.1/", &[Loopback]),
            ("http://\u{ff11}\u{ff12}\u{ff17}\u{3002}0.0.1/", &[Loopback]),
            ("http://[::1]/", &[Loopback]),
            ("http://[::]/", &[Loopback]),
            ("http://0.0.0.0:8080/", &[Loopback]),
            ("http://[::ffff:127.0.0.1]/", &[Loopback]),
            ("http://[::ffff:7f00:1]/", &[Loopback]),
            (
                "http://[0:0:0:0:0:ffff:169.254.169.254]/latest/",
                &[LinkLocal],
            ),
            ("http://[64:ff9b::10.0.0.1]/", &[PrivateNetwork]),
            ("http://[2002:c0a8:0101::1]/", &[PrivateNetwork]),
            ("http://localhost:8080/admin", &[Loopback]),
            ("http://LOCALHOST./", &[Loopback]),
            ("http://app.localhost/", &[Loopback]),
            ("https://user:pass@localhost@evil.example/", &[]),
            ("https://evil.example@localhost/", &[Loopback]),
            ("http:\\\\127.0.0.1\\x", &[Loopback]),
            ("http:127.0.0.1/x", &[Loopback]),
            ("http://169.254.169.254/latest/meta-data/", &[LinkLocal]),
            ("http://[fe80::1%25eth0]/", &[LinkLocal]),
            ("http://10.1.2.3/", &[PrivateNetwork]),
            ("http://172.16.0.1/", &[PrivateNetwork]),
            ("http://172.31.255.255/", &[PrivateNetwork]),
            ("http://192.168.1.1/", &[PrivateNetwork]),
            ("http://100.64.0.1/", &[PrivateNetwork]),
            ("http://[fd00::1]/", &[PrivateNetwork]),
            ("http://printer.local/", &[PrivateNetwork]),
            ("http://mirror.internal:8788/mcp", &[PrivateNetwork]),
            ("http://nas.home.arpa/", &[PrivateNetwork]),
            ("http://intranet/", &[PrivateNetwork]),
            ("postgres://10.0.0.5/db", &[PrivateNetwork]),
            ("redis://localhost:6379/0", &[Loopback]),
            ("custom://127.0.0.1/x", &[Loopback]),
            ("unix:///run/docker.sock", &[NonNetworkScheme]),
            ("javascript:alert(1)", &[NonNetworkScheme]),
            ("data:text/html,<script>", &[NonNetworkScheme]),
        ];
        for (uri, expected) in table {
            assert_eq!(classify(uri), expected.to_vec(), "{uri}");
        }
    }

    #[test]
    fn ordinary_public_uris_are_not_flagged() {
        for uri in [
            "https://example.com/docs/1",
            "https://8.8.8.8/",
            "http://93.184.216.34:8080/x",
            "http://172.32.0.1/",
            "http://100.128.0.1/",
            "http://[2606:4700::1111]/",
            "https://docs.example.org/a?x=127.0.0.1#localhost",
            "fixture://docs/001",
            "resource://intranet/readme",
            "ticket://12345/",
            "custom://0177.0.0.1/",
            "postgres://db.example.com/app",
            "mailto:someone@localhost.example",
            "urn:isbn:0451450523",
            "http://1.2.3.4.5/",
            "http://256.0.0.1/",
            "not a uri",
            "",
        ] {
            assert_eq!(classify(uri), Vec::new(), "{uri}");
        }
    }

    #[test]
    fn templates_are_judged_by_their_expansion_base() {
        assert_eq!(template_base("http://10.0.0.5/{path}"), "http://10.0.0.5/");
        assert_eq!(classify(template_base("file:///{path}")), vec![LocalFile]);
        assert_eq!(classify(template_base("https://{host}/x")), Vec::new());
        assert_eq!(
            classify(template_base("http://localhost{/path}")),
            vec![Loopback]
        );
    }
}
