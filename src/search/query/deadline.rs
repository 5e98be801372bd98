//! A query that stops at its deadline, noting so, without losing block-max pruning.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tantivy::query::{EnableScoring, Explanation, Query, Scorer, Weight};
use tantivy::{DocId, DocSet, Score, SegmentReader};

/// How many documents pass between two looks at the clock.
const DEADLINE_CHECK_EVERY: u32 = 1024;

/// A query that stops when its deadline passes, noting so in `expired`.
#[derive(Debug)]
pub(super) struct DeadlineQuery {
    pub(super) inner: Box<dyn Query>,
    /// An intersection or union of single terms, which tantivy ranks with block-max pruning.
    pub(super) pruned: bool,
    pub(super) deadline: Instant,
    pub(super) expired: Arc<AtomicBool>,
}

impl Clone for DeadlineQuery {
    fn clone(&self) -> DeadlineQuery {
        DeadlineQuery {
            inner: self.inner.box_clone(),
            pruned: self.pruned,
            deadline: self.deadline,
            expired: self.expired.clone(),
        }
    }
}

impl Query for DeadlineQuery {
    fn weight(&self, enable_scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        Ok(Box::new(DeadlineWeight {
            inner: self.inner.weight(enable_scoring)?,
            pruned: self.pruned,
            deadline: self.deadline,
            expired: self.expired.clone(),
        }))
    }
}

struct DeadlineWeight {
    inner: Box<dyn Weight>,
    pruned: bool,
    deadline: Instant,
    expired: Arc<AtomicBool>,
}

impl DeadlineWeight {
    fn passed(&self, calls: &mut u32) -> bool {
        *calls += 1;
        if *calls % DEADLINE_CHECK_EVERY == 0 && Instant::now() >= self.deadline {
            self.expired.store(true, Ordering::Relaxed);
        }
        self.expired.load(Ordering::Relaxed)
    }
}

impl Weight for DeadlineWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        self.inner.scorer(reader, boost)
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        self.inner.explain(reader, doc)
    }

    /// A pruned query (block-max WAND) passes every candidate that may enter the top k
    /// through the callback; past the deadline the callback raises the bar beyond any score,
    /// which ends the pruned loops at once.
    fn for_each_pruning(
        &self,
        threshold: Score,
        reader: &SegmentReader,
        callback: &mut dyn FnMut(DocId, Score) -> Score,
    ) -> tantivy::Result<()> {
        if self.expired.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut calls = 0u32;
        if self.pruned {
            return self
                .inner
                .for_each_pruning(threshold, reader, &mut |doc, score| {
                    if self.passed(&mut calls) {
                        return Score::MAX;
                    }
                    callback(doc, score)
                });
        }
        // A query that scores every match calls back only for the few that enter the top k,
        // so its scorer is driven here, where every document passes the clock.
        let mut scorer = self.inner.scorer(reader, 1.0)?;
        let mut threshold = threshold;
        let mut doc = scorer.doc();
        while doc != tantivy::TERMINATED {
            if self.passed(&mut calls) {
                return Ok(());
            }
            let score = scorer.score();
            if score > threshold {
                threshold = callback(doc, score);
            }
            doc = scorer.advance();
        }
        Ok(())
    }
}
