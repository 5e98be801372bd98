//! Retry pacing shared by every reconnect path: a floor, growth while failures continue, a
//! ceiling, jitter, and the server's own hints (SSE `retry:`, `Retry-After`) honoured up to a cap.
//!
//! The one backoff type of the crate; the session's poll jitter comes from here too.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// No reconnect, of any kind, comes sooner than this after the last attempt: a server that
/// says `retry: 0` or closes every stream at once cannot make a loop.
pub const RECONNECT_FLOOR: Duration = Duration::from_secs(1);

/// The longest wait a server may ask for (SSE `retry:` or `Retry-After`) that we honour;
/// a longer one is cut to this, so a hostile hint cannot park a server for days.
pub const MAX_SERVER_DELAY: Duration = Duration::from_secs(300);

/// The ceiling of `Backoff::default()`: the slowest a failing server is retried.
pub const BACKOFF_CEILING: Duration = Duration::from_secs(300);

/// Exponential backoff with jitter, so many failing servers do not retry in lockstep.
///
/// Each `next_delay*` call counts one failure and makes the next delay longer (doubling from
/// the floor up to the ceiling); `reset` starts over after a success. A delay the server asked
/// for is a lower bound for that one wait, never a reason to go below the floor.
#[derive(Debug, Clone)]
pub struct Backoff {
    floor: Duration,
    ceiling: Duration,
    failures: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(RECONNECT_FLOOR, BACKOFF_CEILING)
    }
}

impl Backoff {
    /// A backoff from `floor` (never below `RECONNECT_FLOOR`) up to `ceiling`.
    pub fn new(floor: Duration, ceiling: Duration) -> Backoff {
        let floor = floor.max(RECONNECT_FLOOR);
        Backoff {
            floor,
            ceiling: ceiling.max(floor),
            failures: 0,
        }
    }

    /// The wait before the next attempt; the one after it will be longer.
    pub fn next_delay(&mut self) -> Duration {
        self.next_delay_honouring(None)
    }

    /// Like `next_delay`, but at least `server_asked` (capped at `MAX_SERVER_DELAY`): the
    /// server's SSE `retry:` or `Retry-After`.
    pub fn next_delay_honouring(&mut self, server_asked: Option<Duration>) -> Duration {
        let grown = self.grown_delay();
        self.failures = self.failures.saturating_add(1);
        let jittered = with_jitter(grown, 0.25);
        match server_asked {
            Some(asked) => jittered.max(asked.min(MAX_SERVER_DELAY)),
            None => jittered,
        }
    }

    /// Forgets past failures: the next delay is the floor again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// Failures counted since the last reset.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The delay before jitter for the current failure count.
    fn grown_delay(&self) -> Duration {
        let exponent = self.failures.min(20);
        self.floor
            .saturating_mul(1u32 << exponent)
            .min(self.ceiling)
    }
}

/// `delay` stretched by a random part of up to `spread` of itself (0.25: up to a quarter), so
/// many servers retried or polled alike spread out instead of moving in lockstep.
pub fn with_jitter(delay: Duration, spread: f64) -> Duration {
    delay + delay.mul_f64(jitter_fraction() * spread)
}

/// A number in [0, 1) from the clock's low bits: enough to spread retries, no generator needed.
fn jitter_fraction() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    (nanos % 1000) as f64 / 1000.0
}

/// Parses an HTTP `Retry-After` value: delay seconds, or an IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`, the form RFC 9110 requires senders to use). A date in
/// the past is no wait; anything unparseable is no hint.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|byte| byte.is_ascii_digit()) {
        // Twenty digits would overflow; such a value is capped later anyway.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = parse_imf_fixdate(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` to a time.
fn parse_imf_fixdate(value: &str) -> Option<SystemTime> {
    let (_weekday, rest) = value.split_once(", ")?;
    let mut fields = rest.split(' ');
    let day: u64 = fields.next()?.parse().ok()?;
    let month = match fields.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = fields.next()?.parse().ok()?;
    let mut clock = fields.next()?.split(':');
    let hours: u64 = clock.next()?.parse().ok()?;
    let minutes: u64 = clock.next()?.parse().ok()?;
    let seconds: u64 = clock.next()?.parse().ok()?;
    if fields.next()? != "GMT" || fields.next().is_some() || clock.next().is_some() {
        return None;
    }
    if !(1..=31).contains(&day) || hours > 23 || minutes > 59 || seconds > 60 || year < 1970 {
        return None;
    }
    let days = days_since_epoch(year, month, day as i64);
    let total = u64::try_from(days).ok()? * 86_400 + hours * 3600 + minutes * 60 + seconds;
    Some(UNIX_EPOCH + Duration::from_secs(total))
}

/// Days from 1970-01-01 to a civil date (Howard Hinnant's `days_from_civil`).
fn days_since_epoch(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_start_at_the_floor_grow_and_stop_at_the_ceiling() {
        let mut backoff = Backoff::new(Duration::ZERO, Duration::from_secs(8));
        let delays: Vec<Duration> = (0..6).map(|_| backoff.next_delay()).collect();
        let bases = [1, 2, 4, 8, 8, 8];
        for (delay, base) in delays.iter().zip(bases) {
            let base = Duration::from_secs(base);
            assert!(*delay >= base && *delay <= base.mul_f64(1.25), "{delays:?}");
        }
        backoff.reset();
        assert!(backoff.next_delay() < Duration::from_secs(2));
    }

    #[test]
    fn a_server_hint_is_a_lower_bound_and_capped() {
        let mut backoff = Backoff::default();
        // `retry: 0` cannot go below the floor.
        assert!(backoff.next_delay_honouring(Some(Duration::ZERO)) >= RECONNECT_FLOOR);
        let asked = Duration::from_secs(7);
        assert!(backoff.next_delay_honouring(Some(asked)) >= asked);
        let huge = Duration::from_secs(86_400 * 30);
        let mut fresh = Backoff::default();
        assert_eq!(fresh.next_delay_honouring(Some(huge)), MAX_SERVER_DELAY);
    }

    #[test]
    fn retry_after_is_seconds_or_an_imf_fixdate() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:51:37 GMT", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("Thu, 29 Feb 2024 00:00:00 GMT", UNIX_EPOCH),
            Some(Duration::from_secs(1_709_164_800))
        );
        for bad in ["", "soon", "-5", "Sun, 06 Nov 1994 08:49:37 PST", "1.5"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad}");
        }
    }
}
