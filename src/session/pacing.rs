//! How long a session waits: reconnect backoff, the poll pace of a server that cannot push, the listen retry, jitter.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A server that keeps answering polls with no change is polled ever less often, up to this
/// many times its interval (and never less often than `resync_interval`).
const POLL_BACKOFF_MAX_FACTOR: u32 = 8;
/// The first wait before reopening a listen stream that failed to reopen, doubled each time.
const LISTEN_RETRY_FIRST: Duration = Duration::from_secs(1);
const LISTEN_RETRY_MAX: Duration = Duration::from_secs(30);

/// A number in [0, 1) from the clock's low bits: enough to spread retries, no generator needed.
fn jitter_fraction() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    (nanos % 1000) as f64 / 1000.0
}

/// `delay` stretched by up to a tenth, so many servers polled alike spread out.
pub(super) fn with_poll_jitter(delay: Duration) -> Duration {
    delay + delay.mul_f64(jitter_fraction() / 10.0)
}

/// Exponential backoff with jitter, so many failing servers do not retry in lockstep.
#[derive(Default)]
pub(super) struct Backoff {
    failures: u32,
}

impl Backoff {
    pub(super) fn next_delay(&mut self) -> Duration {
        let exponent = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        let base = BACKOFF_FIRST.saturating_mul(1 << exponent).min(BACKOFF_MAX);
        base + base.mul_f64(jitter_fraction() / 4.0)
    }

    pub(super) fn reset(&mut self) {
        self.failures = 0;
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
    fn backoff_doubles_with_jitter_and_resets() {
        let mut backoff = Backoff::default();
        let first = backoff.next_delay();
        let second = backoff.next_delay();
        assert!(first >= SECOND && first < SECOND * 5 / 4, "{first:?}");
        assert!(
            second >= 2 * SECOND && second < SECOND * 5 / 2,
            "{second:?}"
        );
        backoff.reset();
        assert!(backoff.next_delay() < SECOND * 5 / 4);
    }
}
