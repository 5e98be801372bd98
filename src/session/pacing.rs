//! How long a session waits: reconnect backoff, the poll pace of a server that cannot push, jitter.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::SyncTimings;

const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// A number in [0, 1) from the clock's low bits: enough to spread retries, no generator needed.
fn jitter_fraction() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    (nanos % 1000) as f64 / 1000.0
}

/// When to poll a server that cannot push: its `ttlMs` hint (never below the floor) or
/// the configured interval, with jitter so many servers spread out.
pub(super) fn poll_delay(
    timings: &SyncTimings,
    resync_interval: Duration,
    ttl_ms: Option<u64>,
) -> Duration {
    let base = match ttl_ms {
        Some(ttl) => Duration::from_millis(ttl).max(timings.poll_floor),
        None => timings.poll_interval,
    };
    let base = base.min(resync_interval);
    base + base.mul_f64(jitter_fraction() / 10.0)
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

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

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
