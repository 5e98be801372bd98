//! How long a session waits: the spacing of notification-driven walks, the poll pace, the listen retry, poll jitter.
//!
//! The reconnect backoff is the crate's one `upstream::Backoff`.

use std::time::Duration;

use tokio::time::Instant;

use crate::upstream::with_jitter;

/// A server that keeps answering polls with no change is polled ever less often, up to this
/// many times its interval (and never less often than `resync_interval`).
const POLL_BACKOFF_MAX_FACTOR: u32 = 8;
/// The first wait before reopening a listen stream that failed to reopen, doubled each time.
const LISTEN_RETRY_FIRST: Duration = Duration::from_secs(1);
const LISTEN_RETRY_MAX: Duration = Duration::from_secs(30);
/// How far poll jitter may stretch an interval: up to a tenth.
const POLL_JITTER_SPREAD: f64 = 0.1;

/// `delay` stretched by up to a tenth, so many servers polled alike spread out.
pub(super) fn with_poll_jitter(delay: Duration) -> Duration {
    with_jitter(delay, POLL_JITTER_SPREAD)
}

/// Spaces the walks that notifications ask for. The next one starts no sooner than
/// `max(min_walk_interval, the last walk's duration)` after the last walk ended, so a server
/// that says its list changed with every answer is walked at most about half the time, and
/// at most once per `min_walk_interval`; the walk held back is delayed, never dropped.
#[derive(Debug, Default)]
pub(super) struct WalkPace {
    /// When the last walk ended (committed, failed or abandoned).
    last_ended: Option<Instant>,
    last_duration: Duration,
}

impl WalkPace {
    /// Records a walk that ran from `started` until `ended`, however it ended.
    pub(super) fn record(&mut self, started: Instant, ended: Instant) {
        self.last_ended = Some(ended);
        self.last_duration = ended.saturating_duration_since(started);
    }

    /// The spacing in force: the floor, or the last walk's duration when that is longer.
    pub(super) fn spacing(&self, min_walk_interval: Duration) -> Duration {
        min_walk_interval.max(self.last_duration)
    }

    /// When a walk a notification asks for at `now` may start: `None` when it may start now.
    pub(super) fn held_until(&self, min_walk_interval: Duration, now: Instant) -> Option<Instant> {
        let earliest = self.last_ended? + self.spacing(min_walk_interval);
        (earliest > now).then_some(earliest)
    }
}

/// The wait before reopening a listen stream after `failures` ends in a row: the first end is
/// a dropped stream and is reopened at once; a reopened stream that failed again waits.
pub(super) fn listen_retry_delay(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        _ => LISTEN_RETRY_FIRST
            .saturating_mul(1 << (failures - 2).min(16))
            .min(LISTEN_RETRY_MAX),
    }
}

/// How often to poll a server that cannot push (SEP-2549: never on its TTL alone, with jitter,
/// backing off while nothing changes).
#[derive(Debug, Default)]
pub(super) struct PollPace {
    /// Completed walks in a row whose swap changed nothing.
    unchanged_in_a_row: u32,
    /// The server's `ttlMs` on its last list result.
    ttl_ms: Option<u64>,
}

/// The poll interval in force (before jitter), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PollPlan {
    pub interval: Duration,
    pub reason: String,
}

impl PollPace {
    /// Records a completed walk: whether its swap changed anything, and the TTL it carried.
    pub(super) fn record(&mut self, changed: bool, ttl_ms: Option<u64>) {
        self.unchanged_in_a_row = if changed {
            0
        } else {
            self.unchanged_in_a_row.saturating_add(1)
        };
        self.ttl_ms = ttl_ms;
    }

    /// `poll_interval`, stretched (never shrunk) by a longer TTL, at most `resync_interval`,
    /// then doubled for every poll in a row that changed nothing, up to a cap.
    pub(super) fn plan(&self, poll_interval: Duration, resync_interval: Duration) -> PollPlan {
        let (mut base, mut reason) = match self.ttl_ms {
            Some(ttl_ms) if Duration::from_millis(ttl_ms) > poll_interval => (
                Duration::from_millis(ttl_ms),
                format!("the server's ttlMs ({ttl_ms} ms) is longer than poll_interval"),
            ),
            Some(ttl_ms) => (
                poll_interval,
                format!("poll_interval; the server's ttlMs ({ttl_ms} ms) does not shorten it"),
            ),
            None => (poll_interval, "poll_interval".to_string()),
        };
        if base > resync_interval {
            base = resync_interval;
            reason.push_str(", capped at resync_interval");
        }
        let cap = base
            .saturating_mul(POLL_BACKOFF_MAX_FACTOR)
            .min(resync_interval)
            .max(base);
        let interval = base
            .saturating_mul(1 << self.unchanged_in_a_row.min(16))
            .min(cap);
        if interval > base {
            let polls = self.unchanged_in_a_row;
            reason.push_str(&format!(
                "; backed off to {} ms after {polls} polls in a row that changed nothing",
                interval.as_millis()
            ));
        }
        PollPlan { interval, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const RESYNC: Duration = Duration::from_secs(900);

    #[test]
    fn a_short_or_zero_ttl_never_shrinks_the_poll_interval() {
        for ttl_ms in [0, 1_000, 60_000] {
            let mut pace = PollPace::default();
            pace.record(true, Some(ttl_ms));
            let plan = pace.plan(60 * SECOND, RESYNC);
            assert_eq!(plan.interval, 60 * SECOND, "{plan:?}");
            assert!(plan.reason.starts_with("poll_interval"), "{plan:?}");
        }
    }

    #[test]
    fn a_longer_ttl_stretches_it_up_to_the_resync_interval() {
        let mut pace = PollPace::default();
        pace.record(true, Some(120_000));
        let plan = pace.plan(60 * SECOND, RESYNC);
        assert_eq!(plan.interval, 120 * SECOND);
        assert!(plan.reason.contains("ttlMs (120000 ms)"), "{plan:?}");
        pace.record(true, Some(3_600_000));
        let plan = pace.plan(60 * SECOND, RESYNC);
        assert_eq!(plan.interval, RESYNC);
        assert!(
            plan.reason.contains("capped at resync_interval"),
            "{plan:?}"
        );
    }

    #[test]
    fn polls_that_change_nothing_back_off_up_to_a_cap_and_a_change_resets_it() {
        let mut pace = PollPace::default();
        let mut intervals = Vec::new();
        for _ in 0..6 {
            pace.record(false, Some(0));
            intervals.push(pace.plan(10 * SECOND, RESYNC).interval.as_secs());
        }
        assert_eq!(intervals, [20, 40, 80, 80, 80, 80]);
        assert!(pace
            .plan(10 * SECOND, RESYNC)
            .reason
            .contains("changed nothing"));
        pace.record(true, Some(0));
        assert_eq!(pace.plan(10 * SECOND, RESYNC).interval, 10 * SECOND);
        // The cap never exceeds the resync interval.
        for _ in 0..6 {
            pace.record(false, None);
        }
        assert_eq!(pace.plan(10 * SECOND, 30 * SECOND).interval, 30 * SECOND);
    }

    #[test]
    fn a_listen_that_fails_to_reopen_waits_longer_each_time() {
        let delays: Vec<u64> = (1..=8)
            .map(|failures| listen_retry_delay(failures).as_secs())
            .collect();
        assert_eq!(delays, [0, 1, 2, 4, 8, 16, 30, 30]);
    }

    #[test]
    fn notification_walks_are_spaced_by_the_floor_or_the_last_walk_s_duration() {
        let floor = SECOND;
        let mut pace = WalkPace::default();
        let start = Instant::now();
        // Nothing walked yet: nothing holds a walk back.
        assert_eq!(pace.held_until(floor, start), None);
        // A short walk: the floor spaces the next one.
        pace.record(start, start + SECOND / 10);
        let ended = start + SECOND / 10;
        assert_eq!(pace.held_until(floor, ended), Some(ended + floor));
        assert_eq!(pace.held_until(floor, ended + floor), None);
        // A walk longer than the floor: its own duration spaces the next one.
        let long_end = start + 10 * SECOND;
        pace.record(start + 7 * SECOND, long_end);
        assert_eq!(pace.spacing(floor), 3 * SECOND);
        assert_eq!(
            pace.held_until(floor, long_end + SECOND),
            Some(long_end + 3 * SECOND)
        );
        assert_eq!(pace.held_until(floor, long_end + 3 * SECOND), None);
    }
}
