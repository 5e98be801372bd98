//! The search gate: at most `max_concurrent` searches run at once, a bounded queue waits for a
//! slot, and every admitted search carries the deadline it must finish by.
//!
//! Any search engine (SQLite FTS5 in the store, a derived index) takes a permit here before it
//! runs and gives the permit's deadline to its own cancellation (SQLite's progress handler,
//! an index's time budget). Cheap methods (`ping`, `status`, reads of one entry) never take
//! it, so they never queue behind searches.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many searches may wait for a slot for every one allowed to run.
const QUEUED_PER_SLOT: usize = 4;

/// The gate's bounds, from `[daemon] search_timeout` and `max_concurrent_searches`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchLimits {
    /// How long one search may run (and, separately, how long it may wait for a slot).
    pub timeout: Duration,
    /// How many searches run at once.
    pub max_concurrent: usize,
}

/// Why a search was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("busy: {running} searches are running and {waiting} are waiting (max_concurrent_searches = {max_concurrent}); try again shortly")]
    Busy {
        running: usize,
        waiting: usize,
        max_concurrent: usize,
    },
    #[error("busy: no search slot came free within {0:?} (search_timeout); try again shortly")]
    WaitedTooLong(Duration),
}

/// What the gate has seen, for `catalog/status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateActivity {
    pub running: usize,
    pub waiting: usize,
    pub max_concurrent: usize,
    /// The most searches that ever ran at once.
    pub peak_running: usize,
    pub refused_busy: u64,
    pub timed_out: u64,
}

/// Shared by every connection; cheap to clone.
#[derive(Clone)]
pub struct SearchGate {
    limits: SearchLimits,
    slots: Arc<Semaphore>,
    counters: Arc<Counters>,
}

#[derive(Default)]
struct Counters {
    running: AtomicUsize,
    waiting: AtomicUsize,
    peak_running: AtomicUsize,
    refused_busy: AtomicU64,
    timed_out: AtomicU64,
}

/// Leave to run one search until `deadline`; the slot is free again when this drops.
pub struct SearchPermit {
    pub deadline: Instant,
    counters: Arc<Counters>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for SearchPermit {
    fn drop(&mut self) {
        self.counters.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl SearchPermit {
    /// Records that the search ran past its deadline and was cancelled.
    pub fn timed_out(&self) {
        self.counters.timed_out.fetch_add(1, Ordering::Relaxed);
    }
}

impl SearchGate {
    pub fn new(limits: SearchLimits) -> SearchGate {
        let max_concurrent = limits.max_concurrent.max(1);
        SearchGate {
            limits: SearchLimits {
                max_concurrent,
                ..limits
            },
            slots: Arc::new(Semaphore::new(max_concurrent)),
            counters: Arc::new(Counters::default()),
        }
    }

    pub fn limits(&self) -> SearchLimits {
        self.limits
    }

    /// Waits for a slot (at most `timeout`), or refuses at once when the queue is full.
    pub async fn acquire(&self) -> Result<SearchPermit, GateError> {
        let max_waiting = self.limits.max_concurrent * QUEUED_PER_SLOT;
        let counters = &self.counters;
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                let waiting = counters.waiting.fetch_add(1, Ordering::AcqRel);
                let _leave_queue = LeaveQueue(counters);
                if waiting >= max_waiting {
                    counters.refused_busy.fetch_add(1, Ordering::Relaxed);
                    return Err(GateError::Busy {
                        running: counters.running.load(Ordering::Acquire),
                        waiting,
                        max_concurrent: self.limits.max_concurrent,
                    });
                }
                let acquired =
                    tokio::time::timeout(self.limits.timeout, self.slots.clone().acquire_owned())
                        .await;
                match acquired {
                    Ok(Ok(slot)) => slot,
                    // The semaphore is never closed; either way the caller may try again.
                    Ok(Err(_)) | Err(_) => {
                        counters.refused_busy.fetch_add(1, Ordering::Relaxed);
                        return Err(GateError::WaitedTooLong(self.limits.timeout));
                    }
                }
            }
        };
        let running = counters.running.fetch_add(1, Ordering::AcqRel) + 1;
        counters.peak_running.fetch_max(running, Ordering::AcqRel);
        Ok(SearchPermit {
            deadline: Instant::now() + self.limits.timeout,
            counters: self.counters.clone(),
            _slot: slot,
        })
    }

    pub fn activity(&self) -> GateActivity {
        let counters = &self.counters;
        GateActivity {
            running: counters.running.load(Ordering::Acquire),
            waiting: counters.waiting.load(Ordering::Acquire),
            max_concurrent: self.limits.max_concurrent,
            peak_running: counters.peak_running.load(Ordering::Acquire),
            refused_busy: counters.refused_busy.load(Ordering::Relaxed),
            timed_out: counters.timed_out.load(Ordering::Relaxed),
        }
    }
}

/// Takes a waiter off the queue count however its wait ends (a slot, a refusal, a timeout, or
/// the connection going away mid-wait).
struct LeaveQueue<'a>(&'a Counters);

impl Drop for LeaveQueue<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn admits_up_to_the_cap_queues_a_bounded_number_and_refuses_the_rest() {
        let gate = SearchGate::new(SearchLimits {
            timeout: Duration::from_millis(200),
            max_concurrent: 2,
        });
        let first = gate.acquire().await.expect("first");
        let _second = gate.acquire().await.expect("second");
        // A third waits; the slot of the first comes free while it waits.
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.acquire().await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        drop(first);
        waiter.await.expect("join").expect("admitted after waiting");
        assert_eq!(gate.activity().peak_running, 2);
        // With both slots held, a waiter gives up after the timeout.
        let _third = gate.acquire().await.expect("third");
        let refused = gate.acquire().await.map(|_| ()).expect_err("no slot");
        assert!(matches!(refused, GateError::WaitedTooLong(_)), "{refused}");
        assert_eq!(gate.activity().waiting, 0);
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once() {
        let gate = SearchGate::new(SearchLimits {
            timeout: Duration::from_secs(30),
            max_concurrent: 1,
        });
        let _held = gate.acquire().await.expect("held");
        let waiters: Vec<_> = (0..QUEUED_PER_SLOT)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.acquire().await.map(|_| ()) })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while gate.activity().waiting < QUEUED_PER_SLOT {
            assert!(Instant::now() < deadline, "waiters never queued");
            tokio::task::yield_now().await;
        }
        let started = Instant::now();
        let refused = gate.acquire().await.map(|_| ()).expect_err("queue full");
        assert!(matches!(refused, GateError::Busy { .. }), "{refused}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(gate.activity().refused_busy, 1);
        waiters.iter().for_each(|waiter| waiter.abort());
    }
}
