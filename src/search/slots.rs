//! A bound on direct searches of the index.

use std::sync::{Condvar, Mutex};
use std::time::Instant;

use super::error::lock;
use super::*;

/// At most a fixed number of searches of the index at once, the others waiting until their
/// deadline: a bound of the index itself, below the daemon's search gate (`search::gate`).
pub(super) struct SearcherSlots {
    running: Mutex<usize>,
    freed: Condvar,
    limit: usize,
}

pub(super) struct SearcherSlot<'a>(&'a SearcherSlots);

impl SearcherSlots {
    pub(super) fn new(limit: usize) -> SearcherSlots {
        SearcherSlots {
            running: Mutex::new(0),
            freed: Condvar::new(),
            limit: limit.max(1),
        }
    }

    /// A slot if one is free now, never waiting.
    pub(super) fn try_enter(&self) -> Option<SearcherSlot<'_>> {
        let mut running = lock(&self.running);
        if *running >= self.limit {
            return None;
        }
        *running += 1;
        Some(SearcherSlot(self))
    }

    pub(super) fn enter(&self, deadline: Instant) -> Result<SearcherSlot<'_>, SearchError> {
        let mut running = lock(&self.running);
        while *running >= self.limit {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SearchError::Busy);
            }
            running = self
                .freed
                .wait_timeout(running, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        *running += 1;
        Ok(SearcherSlot(self))
    }
}

impl Drop for SearcherSlot<'_> {
    fn drop(&mut self) {
        *lock(&self.0.running) -= 1;
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
}
