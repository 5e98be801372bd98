//! A bound on direct searches of the index.

use std::sync::{Condvar, Mutex};
use std::time::Instant;

use super::error::lock;
use super::*;

/// At most a fixed number of searches of the index at once, the others waiting until their
/// deadline: a bound of the index itself, below the daemon's search gate (`search::gate`).
pub(super) struct SearcherSlots {
    counts: Mutex<Counts>,
    freed: Condvar,
    limit: usize,
}

#[derive(Default)]
struct Counts {
    running: usize,
    /// Searches waiting in `enter`: a caller that must not wait (`try_enter`) never takes a
    /// slot one of them is waiting for, so a stream of searches that run where they arrive
    /// cannot starve the ones waiting on blocking threads.
    waiting: usize,
}

pub(super) struct SearcherSlot<'a>(&'a SearcherSlots);

impl SearcherSlots {
    pub(super) fn new(limit: usize) -> SearcherSlots {
        SearcherSlots {
            counts: Mutex::new(Counts::default()),
            freed: Condvar::new(),
            limit: limit.max(1),
        }
    }

    /// A slot if one is free now and no search waits for one, never waiting.
    pub(super) fn try_enter(&self) -> Option<SearcherSlot<'_>> {
        let mut counts = lock(&self.counts);
        if counts.running >= self.limit || counts.waiting > 0 {
            return None;
        }
        counts.running += 1;
        Some(SearcherSlot(self))
    }

    pub(super) fn enter(&self, deadline: Instant) -> Result<SearcherSlot<'_>, SearchError> {
        let mut counts = lock(&self.counts);
        counts.waiting += 1;
        while counts.running >= self.limit {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                counts.waiting -= 1;
                return Err(SearchError::Busy);
            }
            counts = self
                .freed
                .wait_timeout(counts, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        counts.waiting -= 1;
        counts.running += 1;
        Ok(SearcherSlot(self))
    }
}

impl Drop for SearcherSlot<'_> {
    fn drop(&mut self) {
        lock(&self.0.counts).running -= 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_that_must_not_wait_gets_no_slot_while_all_are_taken() {
        let slots = SearcherSlots::new(2);
        let first = slots.try_enter().expect("a free slot");
        let second = slots.enter(Instant::now()).expect("the other free slot");
        assert!(slots.try_enter().is_none());
        assert!(matches!(
            slots.enter(Instant::now()),
            Err(SearchError::Busy)
        ));
        drop(first);
        assert!(slots.try_enter().is_some());
        drop(second);
    }

    /// The rule itself, without a race: a free slot with a search waiting is not taken by a
    /// caller that must not wait. (The test below shows it with a real waiter, whose wake-up
    /// races the check, so without the rule it fails only some of the time.)
    #[test]
    fn a_free_slot_someone_waits_for_is_not_taken_in_passing() {
        let slots = SearcherSlots::new(1);
        lock(&slots.counts).waiting = 1;
        assert!(slots.try_enter().is_none());
        lock(&slots.counts).waiting = 0;
        assert!(slots.try_enter().is_some());
    }

    #[test]
    fn a_caller_that_must_not_wait_leaves_a_freed_slot_to_a_waiting_one() {
        let slots = std::sync::Arc::new(SearcherSlots::new(1));
        let held = slots.try_enter().expect("the free slot");
        let waiter = {
            let slots = slots.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + std::time::Duration::from_secs(30);
                slots.enter(deadline).map(|_| ()).is_ok()
            })
        };
        while lock(&slots.counts).waiting == 0 {
            std::thread::yield_now();
        }
        drop(held);
        // Freed, but waited for: not taken by a caller that must not wait (unless the waiter
        // has already had it and left).
        let taken = slots.try_enter().is_some();
        assert!(
            !taken || lock(&slots.counts).waiting == 0,
            "taken ahead of the waiter"
        );
        assert!(waiter.join().expect("the waiter"), "the waiter got no slot");
        assert!(slots.try_enter().is_some());
    }
}
