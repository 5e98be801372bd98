//! The vectors of recent questions, least recently used out first: agents repeat themselves, and a repeated question then costs a lookup instead of a forward pass.

use std::collections::HashMap;
use std::sync::Arc;

/// The most questions whose vectors are kept (a 384-wide vector and its text: under 1 MB in all).
pub const QUESTION_CACHE_ENTRIES: usize = 256;
/// Questions longer than this (bytes) are embedded every time and never kept, so the cache's
/// memory stays bounded whatever clients ask.
pub const QUESTION_CACHE_TEXT_BYTES: usize = 1024;

/// Question text -> its vector and when it was last asked (a counter, not a clock).
#[derive(Default)]
pub struct QuestionCache {
    entries: HashMap<String, (Arc<[f32]>, u64)>,
    asked: u64,
}

impl QuestionCache {
    /// The vector of `question`, if kept; marks it as just asked.
    pub fn get(&mut self, question: &str) -> Option<Arc<[f32]>> {
        self.asked += 1;
        let asked = self.asked;
        self.entries.get_mut(question).map(|(vector, last)| {
            *last = asked;
            vector.clone()
        })
    }

    /// Keeps `vector` for `question` (unless the text is over the bound), dropping the least
    /// recently asked question when full. The scan is over 256 entries at most, next to a
    /// forward pass of milliseconds.
    pub fn insert(&mut self, question: &str, vector: Arc<[f32]>) {
        if question.len() > QUESTION_CACHE_TEXT_BYTES {
            return;
        }
        self.asked += 1;
        if !self.entries.contains_key(question) && self.entries.len() >= QUESTION_CACHE_ENTRIES {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, last))| *last)
                .map(|(text, _)| text.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.entries
            .insert(question.to_string(), (vector, self.asked));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(value: f32) -> Arc<[f32]> {
        vec![value; 4].into()
    }

    #[test]
    fn the_least_recently_asked_question_goes_first_and_the_bound_holds() {
        let mut cache = QuestionCache::default();
        for number in 0..QUESTION_CACHE_ENTRIES {
            cache.insert(&format!("question {number}"), vector(number as f32));
        }
        // Asking question 0 again makes question 1 the least recently asked.
        assert_eq!(cache.get("question 0").as_deref(), Some(&[0.0; 4][..]));
        cache.insert("one more", vector(-1.0));
        assert_eq!(cache.len(), QUESTION_CACHE_ENTRIES);
        assert!(cache.get("question 1").is_none());
        assert!(cache.get("question 0").is_some());
        assert!(cache.get("question 2").is_some());
        assert!(cache.get("one more").is_some());
        // Inserting a kept question again replaces it without evicting another.
        cache.insert("question 2", vector(2.5));
        assert_eq!(cache.len(), QUESTION_CACHE_ENTRIES);
        assert_eq!(cache.get("question 2").as_deref(), Some(&[2.5; 4][..]));
        for number in 0..10 * QUESTION_CACHE_ENTRIES {
            cache.insert(&format!("flood {number}"), vector(0.0));
        }
        assert_eq!(cache.len(), QUESTION_CACHE_ENTRIES);
    }

    #[test]
    fn long_questions_are_never_kept() {
        let mut cache = QuestionCache::default();
        let long = "x".repeat(QUESTION_CACHE_TEXT_BYTES + 1);
        cache.insert(&long, vector(1.0));
        assert!(cache.get(&long).is_none());
        assert_eq!(cache.len(), 0);
        let fits = "x".repeat(QUESTION_CACHE_TEXT_BYTES);
        cache.insert(&fits, vector(1.0));
        assert!(cache.get(&fits).is_some());
    }
}
