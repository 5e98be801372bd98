//! Handshake-era sessions (`Mcp-Session-Id`): each belongs to the client that opened it, is
//! forgotten after `session_idle_timeout` unused (never while a GET stream of it is open), and
//! a client holds at most `max_sessions_per_client`. A full client's next `initialize` ends its
//! own least recently used session; a full face ends the least recently used session of the
//! client holding the most. A client whose session was ended gets 404 and initializes again,
//! as the protocol says, so a flood of `initialize` costs the flooder its own sessions.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::limits::ClientKey;

/// The bounds sessions are kept within.
#[derive(Debug, Clone, Copy)]
pub(super) struct SessionBounds {
    pub max: usize,
    pub per_client: usize,
    pub idle: Duration,
}

struct Session {
    owner: ClientKey,
    last_used: Instant,
    /// GET streams of this session open now: while one is, the session is in use.
    streams: usize,
    /// Dropped with the session (DELETE, ended to make room, expired): its streams end.
    ended: watch::Sender<()>,
}

impl Session {
    fn expired(&self, now: Instant, idle: Duration) -> bool {
        self.streams == 0 && now.duration_since(self.last_used) >= idle
    }
}

/// What opening a session did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Opened {
    /// Opened; this many sessions were ended to make room.
    Yes { evicted: usize },
    /// Refused: every session that could make room has an open stream.
    Full,
}

#[derive(Default)]
pub(super) struct Sessions {
    by_id: HashMap<String, Session>,
}

impl Sessions {
    /// Opens session `id` for `owner`, ending others first if a bound needs it.
    pub fn open(
        &mut self,
        id: String,
        owner: &ClientKey,
        now: Instant,
        bounds: SessionBounds,
    ) -> Opened {
        self.by_id
            .retain(|_, session| !session.expired(now, bounds.idle));
        let mut evicted = 0;
        let owned = self
            .by_id
            .values()
            .filter(|session| &session.owner == owner)
            .count();
        if owned >= bounds.per_client {
            match self.least_recently_used(|session| &session.owner == owner) {
                Some(oldest) => {
                    self.by_id.remove(&oldest);
                    evicted += 1;
                }
                None => return Opened::Full,
            }
        }
        if self.by_id.len() >= bounds.max {
            let Some(heaviest) = self.heaviest_owner() else {
                return Opened::Full;
            };
            match self.least_recently_used(|session| session.owner == heaviest) {
                Some(oldest) => {
                    self.by_id.remove(&oldest);
                    evicted += 1;
                }
                None => return Opened::Full,
            }
        }
        self.by_id.insert(
            id,
            Session {
                owner: owner.clone(),
                last_used: now,
                streams: 0,
                ended: watch::channel(()).0,
            },
        );
        Opened::Yes { evicted }
    }

    /// Marks `id` used by `client` now; false when it is unknown, expired (then forgotten), or
    /// another token's.
    pub fn touch(&mut self, id: &str, client: &ClientKey, now: Instant, idle: Duration) -> bool {
        let Some(session) = self.by_id.get_mut(id) else {
            return false;
        };
        if session.expired(now, idle) {
            self.by_id.remove(id);
            return false;
        }
        if session.owner.token != client.token {
            return false;
        }
        session.last_used = now;
        true
    }

    pub fn remove(&mut self, id: &str, client: &ClientKey) -> bool {
        match self.by_id.get(id) {
            Some(session) if session.owner.token == client.token => {
                self.by_id.remove(id);
                true
            }
            _ => false,
        }
    }

    /// A GET stream of `id` opened (true) or ended (false). An opened stream gets what closes
    /// when the session ends.
    pub fn stream(&mut self, id: &str, opened: bool, now: Instant) -> Option<watch::Receiver<()>> {
        let session = self.by_id.get_mut(id)?;
        session.last_used = now;
        session.streams = match opened {
            true => session.streams + 1,
            false => session.streams.saturating_sub(1),
        };
        opened.then(|| session.ended.subscribe())
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// The session least recently used among those `which` picks that have no open stream.
    fn least_recently_used(&self, which: impl Fn(&Session) -> bool) -> Option<String> {
        self.by_id
            .iter()
            .filter(|(_, session)| session.streams == 0 && which(session))
            .min_by_key(|(_, session)| session.last_used)
            .map(|(id, _)| id.clone())
    }

    /// The client holding the most sessions that could be ended.
    fn heaviest_owner(&self) -> Option<ClientKey> {
        let mut counts: HashMap<&ClientKey, usize> = HashMap::new();
        for session in self.by_id.values().filter(|session| session.streams == 0) {
            *counts.entry(&session.owner).or_default() += 1;
        }
        counts
            .into_iter()
            .max_by_key(|(_, count)| *count)
            .map(|(owner, _)| owner.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(last: u8) -> ClientKey {
        ClientKey {
            token: None,
            peer: std::net::IpAddr::from([127, 0, 0, last]),
        }
    }

    const BOUNDS: SessionBounds = SessionBounds {
        max: 6,
        per_client: 3,
        idle: Duration::from_secs(60),
    };

    #[test]
    fn a_flooding_client_ends_only_its_own_sessions() {
        let start = Instant::now();
        let mut sessions = Sessions::default();
        let good = client(1);
        let flooder = client(2);
        assert_eq!(
            sessions.open("good".into(), &good, start, BOUNDS),
            Opened::Yes { evicted: 0 }
        );
        for i in 0..1024u64 {
            let at = start + Duration::from_millis(i + 1);
            sessions.open(format!("flood{i}"), &flooder, at, BOUNDS);
        }
        assert_eq!(sessions.len(), 4);
        let later = start + Duration::from_secs(2);
        assert!(sessions.touch("good", &good, later, BOUNDS.idle));
        assert!(sessions.touch("flood1023", &flooder, later, BOUNDS.idle));
        assert!(!sessions.touch("flood0", &flooder, later, BOUNDS.idle));
    }

    #[test]
    fn a_full_face_ends_a_session_of_the_client_holding_the_most() {
        let start = Instant::now();
        let mut sessions = Sessions::default();
        sessions.open("good".into(), &client(1), start, BOUNDS);
        let mut at = start;
        for peer in 2..=5 {
            for i in 0..3 {
                at += Duration::from_millis(1);
                sessions.open(format!("{peer}-{i}"), &client(peer), at, BOUNDS);
            }
        }
        assert!(sessions.len() <= BOUNDS.max);
        assert!(sessions.touch("good", &client(1), at, BOUNDS.idle));
    }

    #[test]
    fn idle_sessions_expire_but_not_while_streaming() {
        let start = Instant::now();
        let mut sessions = Sessions::default();
        sessions.open("idle".into(), &client(1), start, BOUNDS);
        sessions.open("streaming".into(), &client(1), start, BOUNDS);
        sessions.stream("streaming", true, start);
        let later = start + BOUNDS.idle;
        assert!(!sessions.touch("idle", &client(1), later, BOUNDS.idle));
        assert!(sessions.touch("streaming", &client(1), later, BOUNDS.idle));
    }

    #[test]
    fn another_token_cannot_use_or_end_a_session() {
        let start = Instant::now();
        let mut sessions = Sessions::default();
        let owner = ClientKey {
            token: Some("fleet".into()),
            peer: std::net::IpAddr::from([127, 0, 0, 1]),
        };
        let other = ClientKey {
            token: Some("other".into()),
            ..owner.clone()
        };
        sessions.open("s".into(), &owner, start, BOUNDS);
        assert!(!sessions.touch("s", &other, start, BOUNDS.idle));
        assert!(!sessions.remove("s", &other));
        assert!(sessions.remove("s", &owner));
    }

    #[test]
    fn a_sessions_streams_hear_when_it_ends() {
        let start = Instant::now();
        let mut sessions = Sessions::default();
        sessions.open("s".into(), &client(1), start, BOUNDS);
        let ended = sessions.stream("s", true, start).expect("a receiver");
        assert!(ended.has_changed().is_ok(), "open while the session is");
        assert!(sessions.remove("s", &client(1)));
        assert!(ended.has_changed().is_err(), "closed with the session");
    }

    #[test]
    fn a_client_whose_every_session_streams_is_refused() {
        let start = Instant::now();
        let mut sessions = Sessions::default();
        for i in 0..3 {
            sessions.open(format!("s{i}"), &client(1), start, BOUNDS);
            sessions.stream(&format!("s{i}"), true, start);
        }
        assert_eq!(
            sessions.open("s3".into(), &client(1), start, BOUNDS),
            Opened::Full
        );
    }
}
