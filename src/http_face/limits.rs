//! The HTTP face's shares and refusals: who counts as one peer and one client, a counted share
//! of a bounded resource (connections, streams) per peer or client, and the refusal log that
//! says each kind of refusal once per interval with a count instead of once per request.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the refusal log says a kind of refusal again (with the count since its last line).
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The peer a connection counts against: its address, an IPv4 client reached over IPv6 as
/// itself, and an IPv6 address as its /64 (one host or one home network holds a whole /64,
/// so its addresses cost nothing to change).
pub(super) fn peer_key(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) if !v6.is_loopback() => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        other => other,
    }
}

/// One client of the face's sessions and streams: its token and its peer, or its peer alone
/// on a face without tokens. The hosts of a fleet that share one token are clients of their
/// own; whoever holds a token cannot make more addresses cheaply, nor new tokens at all.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ClientKey {
    pub token: Option<String>,
    pub peer: IpAddr,
}

/// Counts of a bounded resource held per key; a `ShareGuard` gives its unit back when dropped.
pub(super) struct Shares<K: Hash + Eq + Clone> {
    held: Arc<Mutex<HashMap<K, usize>>>,
}

impl<K: Hash + Eq + Clone> Default for Shares<K> {
    fn default() -> Shares<K> {
        Shares {
            held: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl<K: Hash + Eq + Clone> Shares<K> {
    /// One more unit for `key`, unless it already holds `limit`.
    pub fn try_take(&self, key: &K, limit: usize) -> Option<ShareGuard<K>> {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = held.entry(key.clone()).or_insert(0);
        if *count >= limit {
            return None;
        }
        *count += 1;
        Some(self.guard(key))
    }

    /// One more unit for `key`, whatever it holds (a count that another bound limits).
    pub fn take(&self, key: &K) -> ShareGuard<K> {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *held.entry(key.clone()).or_insert(0) += 1;
        self.guard(key)
    }

    fn guard(&self, key: &K) -> ShareGuard<K> {
        ShareGuard {
            held: self.held.clone(),
            key: key.clone(),
        }
    }

    /// The most units any one key holds now.
    pub fn largest(&self) -> usize {
        let held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        held.values().copied().max().unwrap_or(0)
    }

    /// Units `key` holds now.
    pub fn held(&self, key: &K) -> usize {
        let held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        held.get(key).copied().unwrap_or(0)
    }
}

/// The streams of `max_streams` kept for identities (a token over every address it comes
/// from, else an address) that hold none: a token spread over many addresses has a share per
/// address, and without a reserve it could hold every stream and leave a downstream none.
/// `max_streams_per_client`, at most a quarter of `max_streams`.
pub(super) fn stream_reserve(max_streams: usize, max_streams_per_client: usize) -> usize {
    max_streams_per_client.min(max_streams / 4)
}

/// One unit of a key's share, given back when dropped.
pub(super) struct ShareGuard<K: Hash + Eq + Clone> {
    held: Arc<Mutex<HashMap<K, usize>>>,
    key: K,
}

impl<K: Hash + Eq + Clone> Drop for ShareGuard<K> {
    fn drop(&mut self) {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = held.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// Why the face turned a request or connection away (or ended a session to make room).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    NoToken,
    UnknownToken,
    Origin,
    Host,
    BodyTooLarge,
    BodyTimeout,
    PeerConnections,
    Streams,
    ClientStreams,
    Sessions,
    SessionEvicted,
}

impl Refusal {
    const ALL: [Refusal; 11] = [
        Refusal::NoToken,
        Refusal::UnknownToken,
        Refusal::Origin,
        Refusal::Host,
        Refusal::BodyTooLarge,
        Refusal::BodyTimeout,
        Refusal::PeerConnections,
        Refusal::Streams,
        Refusal::ClientStreams,
        Refusal::Sessions,
        Refusal::SessionEvicted,
    ];

    fn index(self) -> usize {
        Refusal::ALL
            .iter()
            .position(|refusal| *refusal == self)
            .unwrap_or(0)
    }

    /// What the log line says, naming the bound or rule that refused.
    fn reason(self) -> &'static str {
        match self {
            Refusal::NoToken => "no bearer token",
            Refusal::UnknownToken => "unknown bearer token",
            Refusal::Origin => "origin not in [http] allowed_origins",
            Refusal::Host => "Host not an IP address, localhost or in [http] allowed_hosts",
            Refusal::BodyTooLarge => "body larger than [http] max_body",
            Refusal::BodyTimeout => "body not sent within [http] body_timeout",
            Refusal::PeerConnections => "connection past [http] max_connections_per_peer",
            Refusal::Streams => "stream past [http] max_streams",
            Refusal::ClientStreams => "stream past [http] max_streams_per_client",
            Refusal::Sessions => {
                "session refused: [http] max_sessions reached, every session streaming"
            }
            Refusal::SessionEvicted => {
                "session ended to make room ([http] max_sessions_per_client or max_sessions)"
            }
        }
    }
}

#[derive(Default, Clone, Copy)]
struct RefusalCount {
    /// Refusals not yet in a log line.
    unsaid: u64,
    total: u64,
    last_line: Option<Instant>,
}

/// Each kind of refusal logged at INFO at most once per `REFUSAL_LOG_INTERVAL`: the first at
/// once, later ones counted and said with their count (a flood of 5,000 bad tokens is a few
/// lines, not 5,000).
#[derive(Default)]
pub(super) struct RefusalLog {
    counts: Mutex<[RefusalCount; Refusal::ALL.len()]>,
}

impl RefusalLog {
    pub fn refused(&self, refusal: Refusal) {
        let now = Instant::now();
        let line = {
            let mut counts = self
                .counts
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let count = &mut counts[refusal.index()];
            count.unsaid += 1;
            count.total += 1;
            Self::take_line(count, now)
        };
        if let Some((refused, total)) = line {
            Self::say(refusal, refused, total);
        }
    }

    /// Says every kind with refusals not yet said whose interval has passed (called by a
    /// timer, so the last ones of a flood are said too).
    pub fn flush(&self) {
        let now = Instant::now();
        let mut lines = Vec::new();
        {
            let mut counts = self
                .counts
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            for (refusal, count) in Refusal::ALL.iter().zip(counts.iter_mut()) {
                if count.unsaid > 0 {
                    if let Some((refused, total)) = Self::take_line(count, now) {
                        lines.push((*refusal, refused, total));
                    }
                }
            }
        }
        for (refusal, refused, total) in lines {
            Self::say(refusal, refused, total);
        }
    }

    /// Refusals since the last line and in all, when a line is due now.
    fn take_line(count: &mut RefusalCount, now: Instant) -> Option<(u64, u64)> {
        let due = match count.last_line {
            None => true,
            Some(last) => now.duration_since(last) >= REFUSAL_LOG_INTERVAL,
        };
        if !due {
            return None;
        }
        count.last_line = Some(now);
        let refused = std::mem::take(&mut count.unsaid);
        Some((refused, count.total))
    }

    fn say(refusal: Refusal, refused: u64, total: u64) {
        tracing::info!(
            reason = refusal.reason(),
            refused,
            total,
            "HTTP requests refused (said at most once per {}s, with the count since the last line)",
            REFUSAL_LOG_INTERVAL.as_secs()
        );
    }

    /// Refusals of this kind so far.
    #[cfg(test)]
    pub fn total(&self, refusal: Refusal) -> u64 {
        let counts = self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        counts[refusal.index()].total
    }
}

/// Whose share of the search gate a request's searches use (every request of one identity is
/// one client of the gate, as a socket connection is), and who holds streams against the
/// reserve of `max_streams` (`HttpFace::stream_place`).
///
/// The token when the face has tokens: a client cannot make new ones, and whoever holds one
/// token is one principal. Else the peer's address, without the port: a new connection (a
/// new port) or a new `Mcp-Session-Id` (minted by any `initialize`; the 2026-07-28 era has
/// none) costs nothing, so neither may start a fresh share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum ClientIdentity {
    Token(String),
    Address(IpAddr),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_peer_is_its_64_and_ipv4_is_itself() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("v6");
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().expect("v6");
        let c: IpAddr = "2001:db8:1:3::1".parse().expect("v6");
        assert_eq!(peer_key(a), peer_key(b));
        assert_ne!(peer_key(a), peer_key(c));
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().expect("mapped");
        assert_eq!(peer_key(mapped), "127.0.0.2".parse::<IpAddr>().expect("v4"));
        let loopback: IpAddr = "::1".parse().expect("v6");
        assert_eq!(peer_key(loopback), loopback);
    }

    #[test]
    fn a_share_stops_at_its_limit_and_is_given_back() {
        let shares = Shares::default();
        let first = shares.try_take(&"a", 2).expect("one");
        let _second = shares.try_take(&"a", 2).expect("two");
        assert!(shares.try_take(&"a", 2).is_none());
        assert!(
            shares.try_take(&"b", 2).is_some(),
            "another key has its own share"
        );
        drop(first);
        assert_eq!(shares.held(&"a"), 1);
        assert!(shares.try_take(&"a", 2).is_some());
    }

    #[test]
    fn refusals_are_counted_and_said_once_per_interval() {
        let log = RefusalLog::default();
        for _ in 0..5000 {
            log.refused(Refusal::UnknownToken);
        }
        log.flush();
        assert_eq!(log.total(Refusal::UnknownToken), 5000);
        let counts = log.counts.lock().expect("lock");
        // The first was said at once; the other 4,999 wait for the interval's line.
        assert_eq!(counts[Refusal::UnknownToken.index()].unsaid, 4999);
        assert_eq!(counts[Refusal::NoToken.index()].total, 0);
    }
}
