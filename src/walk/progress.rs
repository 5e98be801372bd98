//! How far the walk in flight got: pages and entries counted as the one cursor walk reads
//! them, the rate, and an estimate from the last complete walk's count; read by `status`
//! without asking the walk, and logged at most every `PROGRESS_LOG_INTERVAL`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crate::protocol::WalkProgress;
use crate::store::now_ms;

/// The least time between two log lines of one walk's progress.
pub const PROGRESS_LOG_INTERVAL_MS: i64 = 10_000;

/// A server's walk meter: the session's actor starts and ends walks on it, the cursor walk
/// counts pages into it, and `status` reads it. Atomics: nobody waits on anybody.
#[derive(Debug, Default)]
pub struct WalkMeter {
    pages: AtomicU64,
    entries: AtomicU64,
    /// When the walk in flight started; 0: no walk in flight.
    started_at_ms: AtomicI64,
    last_logged_ms: AtomicI64,
    /// The entries the last complete walk counted, plus one; 0: not known yet.
    expected_plus_one: AtomicU64,
}

tokio::task_local! {
    /// The meter of the walk this task runs; the session's actor sets it around the walk, so
    /// every walk function reports into it without carrying it.
    static CURRENT: Arc<WalkMeter>;
}

impl WalkMeter {
    /// A walk starts: counts from zero.
    pub fn begin(&self) {
        self.pages.store(0, Ordering::Relaxed);
        self.entries.store(0, Ordering::Relaxed);
        let now = now_ms();
        self.last_logged_ms.store(now, Ordering::Relaxed);
        self.started_at_ms.store(now.max(1), Ordering::Relaxed);
    }

    /// The walk ended; a complete one's count is the next walk's expectation.
    pub fn end(&self, complete: bool) {
        if complete {
            let counted = self.entries.load(Ordering::Relaxed);
            self.expected_plus_one
                .store(counted.saturating_add(1), Ordering::Relaxed);
        }
        self.started_at_ms.store(0, Ordering::Relaxed);
    }

    /// Runs `walk` with this meter as the one its pages count into.
    pub async fn measure<T>(self: Arc<Self>, walk: impl std::future::Future<Output = T>) -> T {
        CURRENT.scope(self, walk).await
    }

    /// What the walk in flight got to; `None` when no walk runs.
    pub fn snapshot(&self) -> Option<WalkProgress> {
        let started_at_ms = self.started_at_ms.load(Ordering::Relaxed);
        if started_at_ms == 0 {
            return None;
        }
        let entries = self.entries.load(Ordering::Relaxed);
        let elapsed_ms = (now_ms() - started_at_ms).max(1) as u64;
        let per_second = entries.saturating_mul(1000) / elapsed_ms;
        let expected_entries = self
            .expected_plus_one
            .load(Ordering::Relaxed)
            .checked_sub(1);
        let eta_ms = match (expected_entries, entries) {
            (Some(expected), counted) if counted > 0 => {
                // At the rate so far; a walk past the last count is about to end.
                let left = expected.saturating_sub(counted);
                Some(left.saturating_mul(elapsed_ms) / counted)
            }
            _ => None,
        };
        Some(WalkProgress {
            pages: self.pages.load(Ordering::Relaxed),
            entries,
            per_second,
            started_at_ms,
            expected_entries,
            eta_ms,
        })
    }

    fn count(&self, entries: u64) {
        self.pages.fetch_add(1, Ordering::Relaxed);
        self.entries.fetch_add(entries, Ordering::Relaxed);
        let now = now_ms();
        let last = self.last_logged_ms.load(Ordering::Relaxed);
        let due = now - last >= PROGRESS_LOG_INTERVAL_MS;
        if due
            && self
                .last_logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            if let Some(progress) = self.snapshot() {
                tracing::info!(
                    pages = progress.pages,
                    entries = progress.entries,
                    per_second = progress.per_second,
                    expected_entries = progress.expected_entries,
                    eta_ms = progress.eta_ms,
                    "walk in progress"
                );
            }
        }
    }
}

/// One page of `entries` items read by the walk this task runs (none outside a measured walk).
pub(crate) fn count_page(entries: u64) {
    let _ = CURRENT.try_with(|meter| meter.count(entries));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pages_count_into_the_measured_walk_and_the_estimate_follows_the_last_count() {
        let meter = Arc::new(WalkMeter::default());
        assert_eq!(meter.snapshot(), None);
        meter.begin();
        meter.clone().measure(async { count_page(100) }).await;
        count_page(50); // Outside the walk: counted nowhere.
        let first = meter.snapshot().expect("in flight");
        assert_eq!((first.pages, first.entries), (1, 100));
        assert_eq!((first.expected_entries, first.eta_ms), (None, None));
        meter.end(true);
        assert_eq!(meter.snapshot(), None);
        meter.begin();
        meter.clone().measure(async { count_page(25) }).await;
        let second = meter.snapshot().expect("in flight");
        assert_eq!(second.expected_entries, Some(100));
        assert!(second.eta_ms.is_some());
    }

    #[test]
    fn progress_is_logged_at_most_once_per_interval() {
        let meter = WalkMeter::default();
        meter.begin();
        let begun = meter.last_logged_ms.load(Ordering::Relaxed);
        meter.count(10);
        assert_eq!(
            meter.last_logged_ms.load(Ordering::Relaxed),
            begun,
            "logged too soon"
        );
        let long_ago = begun - PROGRESS_LOG_INTERVAL_MS;
        meter.last_logged_ms.store(long_ago, Ordering::Relaxed);
        meter.count(10);
        let logged = meter.last_logged_ms.load(Ordering::Relaxed);
        assert!(logged >= begun, "a page after the interval logs");
        meter.count(10);
        assert_eq!(
            meter.last_logged_ms.load(Ordering::Relaxed),
            logged,
            "logged twice"
        );
    }
}
