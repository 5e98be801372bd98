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

/// The least spacing of a follower's follows (`min_walk_interval` when shorter): a follow costs
/// what changed, so its own duration spaces the next one, and this floor only stops an upstream
/// that announces a change with every answer from keeping a follower busy.
pub(super) const FOLLOW_FLOOR: Duration = Duration::from_millis(100);

/// What a finished walk cost, as the pace counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WalkCost {
    /// A walk of a server that is not followed: every list read in full.
    Walk,
    /// A follow of an upstream mirror's feed (a delta, or nothing to take): what changed.
    Follow,
    /// A follower's full walk of its upstream (its first, or the feed could not be followed).
    FollowerWalk,
    /// A follower's walk or follow that failed (the backoff spaces what comes next).
    FollowerFailed,
}

/// Spaces the walks that notifications ask for. A walk of a server starts no sooner than
/// `max(min_walk_interval, the last walk's duration)` after the last walk ended, so a server
/// that says its list changed with every answer is walked at most about half the time, and at
/// most once per `min_walk_interval`; the walk held back is delayed, never dropped.
///
/// A follow is paced by what a follow costs: its own last duration, at least `FOLLOW_FLOOR`,
/// never by the last full walk (a first load's, say). A follower whose feed fails twice in a
/// row (two full walks) is paced as a walked server until it follows again.
#[derive(Debug)]
pub(super) struct WalkPace {
    /// When the last walk ended (committed, failed or abandoned).
    last_ended: Option<Instant>,
    last_duration: Duration,
    /// The last follow's duration (zero before the first).
    last_follow_duration: Duration,
    /// What the last two walks cost, the newest first.
    costs: [WalkCost; 2],
}

impl Default for WalkPace {
    fn default() -> WalkPace {
        WalkPace {
            last_ended: None,
            last_duration: Duration::ZERO,
            last_follow_duration: Duration::ZERO,
            costs: [WalkCost::Follow; 2],
        }
    }
}

impl WalkPace {
    /// Records a walk that ran from `started` until `ended`, however it ended.
    pub(super) fn record(&mut self, started: Instant, ended: Instant, cost: WalkCost) {
        self.last_ended = Some(ended);
        self.last_duration = ended.saturating_duration_since(started);
        if cost == WalkCost::Follow {
            self.last_follow_duration = self.last_duration;
        }
        self.costs = [cost, self.costs[0]];
    }

    /// The spacing in force: the floor, or the last walk's duration when that is longer; for a
    /// follower, the follow's (see the type).
    pub(super) fn spacing(&self, min_walk_interval: Duration) -> Duration {
        match self.costs {
            [WalkCost::Walk, _] | [WalkCost::FollowerWalk, WalkCost::FollowerWalk] => {
                min_walk_interval.max(self.last_duration)
            }
            [WalkCost::Follow | WalkCost::FollowerWalk | WalkCost::FollowerFailed, _] => {
                min_walk_interval
                    .min(FOLLOW_FLOOR)
                    .max(self.last_follow_duration)
            }
        }
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
        pace.record(start, start + SECOND / 10, WalkCost::Walk);
        let ended = start + SECOND / 10;
        assert_eq!(pace.held_until(floor, ended), Some(ended + floor));
        assert_eq!(pace.held_until(floor, ended + floor), None);
        // A walk longer than the floor: its own duration spaces the next one.
        let long_end = start + 10 * SECOND;
        pace.record(start + 7 * SECOND, long_end, WalkCost::Walk);
        assert_eq!(pace.spacing(floor), 3 * SECOND);
        assert_eq!(
            pace.held_until(floor, long_end + SECOND),
            Some(long_end + 3 * SECOND)
        );
        assert_eq!(pace.held_until(floor, long_end + 3 * SECOND), None);
    }

    #[test]
    fn follows_are_spaced_by_their_own_cost_never_by_a_full_walk() {
        let floor = SECOND;
        let mut pace = WalkPace::default();
        let start = Instant::now();
        // A follower's first load took 15 s: the follow after it waits only the follow floor.
        let loaded = start + 15 * SECOND;
        pace.record(start, loaded, WalkCost::FollowerWalk);
        assert_eq!(pace.spacing(floor), FOLLOW_FLOOR);
        assert_eq!(pace.held_until(floor, loaded + FOLLOW_FLOOR), None);
        // A follow of 300 ms spaces the next follow by its own duration.
        let followed = loaded + SECOND;
        pace.record(followed - 3 * SECOND / 10, followed, WalkCost::Follow);
        assert_eq!(pace.spacing(floor), 3 * SECOND / 10);
        // A fallback walk between follows does not hold the next follow either...
        let walked = followed + 10 * SECOND;
        pace.record(followed + 2 * SECOND, walked, WalkCost::FollowerWalk);
        assert_eq!(pace.spacing(floor), 3 * SECOND / 10);
        // A failed attempt between two full walks leaves the follow pace in force...
        pace.record(walked, walked + SECOND, WalkCost::FollowerFailed);
        assert_eq!(pace.spacing(floor), 3 * SECOND / 10);
        pace.record(walked + SECOND, walked + 3 * SECOND, WalkCost::FollowerWalk);
        assert_eq!(pace.spacing(floor), 3 * SECOND / 10);
        // ...but a feed that fails again (two full walks in a row) is walked at the walk pace.
        let again = walked + 9 * SECOND;
        pace.record(walked + SECOND, again, WalkCost::FollowerWalk);
        assert_eq!(pace.spacing(floor), 8 * SECOND);
        // The floor is min_walk_interval when that is shorter than the follow floor.
        pace.record(again, again, WalkCost::Follow);
        assert_eq!(pace.spacing(SECOND / 1000), SECOND / 1000);
    }
}
