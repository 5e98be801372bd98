//! Fuses the lexical ranking with the semantic one: each list to a fixed depth, so the fused order (and so every page and cursor) never depends on the page size asked for.

use std::collections::HashMap;

use crate::protocol::Kind;

/// How deep each list is read before fusing: hybrid and semantic answers page through at most
/// this many of each.
pub const FUSION_DEPTH: usize = 100;

/// Reciprocal rank fusion's constant (Cormack et al. 2009): a hit's fused score is the sum of
/// `1 / (RRF_K + rank)` over the lists it is in.
pub const RRF_K: f64 = 60.0;

/// How two rankings become one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// Reciprocal rank fusion: ranks only, scores ignored.
    ReciprocalRank,
    /// Each list's scores scaled to 0..1 by its own minimum and maximum, then weighted
    /// (`lexical` for the words, `1 - lexical` for the meaning); a hit absent from a list
    /// gets 0 there.
    MinMax { lexical: f64 },
}

/// The fusion `catalog/search` uses in hybrid mode, chosen by `bench/run retrieval`.
pub const DEFAULT_FUSION: Fusion = Fusion::MinMax { lexical: 0.5 };

/// What identifies a hit across the two lists.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HitKey {
    pub kind: Kind,
    pub server: String,
    /// The URI (template) of a resource (template), the name of a tool or prompt.
    pub identity: String,
}

/// One ranked list's entries, best first, each with its score.
pub struct Ranked<T> {
    pub key: HitKey,
    pub score: f64,
    pub hit: T,
}

/// The fused ranking of `lexical` and `semantic` (each best first), best first, each hit with
/// its fused score; a hit in both lists appears once (the lexical one's details kept, with
/// its snippet). Equal scores are ordered by key, so the order is total.
pub fn fuse<T>(lexical: Vec<Ranked<T>>, semantic: Vec<Ranked<T>>, fusion: Fusion) -> Vec<(f64, T)> {
    let mut fused: HashMap<HitKey, (f64, Option<T>)> = HashMap::new();
    let scaled = |list: &[Ranked<T>]| -> Vec<f64> {
        match fusion {
            Fusion::ReciprocalRank => (0..list.len())
                .map(|rank| 1.0 / (RRF_K + rank as f64 + 1.0))
                .collect(),
            Fusion::MinMax { .. } => {
                let highest = list.iter().map(|hit| hit.score).fold(f64::MIN, f64::max);
                let lowest = list.iter().map(|hit| hit.score).fold(f64::MAX, f64::min);
                let range = highest - lowest;
                list.iter()
                    .map(|hit| {
                        if range > 0.0 {
                            (hit.score - lowest) / range
                        } else {
                            1.0
                        }
                    })
                    .collect()
            }
        }
    };
    let (lexical_weight, semantic_weight) = match fusion {
        Fusion::ReciprocalRank => (1.0, 1.0),
        Fusion::MinMax { lexical } => (lexical, 1.0 - lexical),
    };
    for (list, weight) in [(lexical, lexical_weight), (semantic, semantic_weight)] {
        let scores = scaled(&list);
        for (ranked, score) in list.into_iter().zip(scores) {
            let slot = fused.entry(ranked.key).or_insert((0.0, None));
            slot.0 += weight * score;
            if slot.1.is_none() {
                slot.1 = Some(ranked.hit);
            }
        }
    }
    let mut ordered: Vec<(f64, HitKey, T)> = fused
        .into_iter()
        .filter_map(|(key, (score, hit))| hit.map(|hit| (score, key, hit)))
        .collect();
    ordered.sort_by(|left, right| {
        right
            .0
            .total_cmp(&left.0)
            .then_with(|| left.1.cmp(&right.1))
    });
    ordered
        .into_iter()
        .map(|(score, _, hit)| (score, hit))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranked(name: &str, score: f64) -> Ranked<String> {
        Ranked {
            key: HitKey {
                kind: Kind::Tool,
                server: "s".into(),
                identity: name.into(),
            },
            score,
            hit: name.to_string(),
        }
    }

    #[test]
    fn a_hit_in_both_lists_rises_and_appears_once() {
        let lexical = [ranked("a", 9.0), ranked("b", 5.0), ranked("c", 1.0)];
        let semantic = [ranked("c", 0.9), ranked("d", 0.5), ranked("a", 0.1)];
        for fusion in [Fusion::ReciprocalRank, Fusion::MinMax { lexical: 0.5 }] {
            let fused: Vec<String> = fuse(
                lexical.iter().map(|r| ranked(&r.hit, r.score)).collect(),
                semantic.iter().map(|r| ranked(&r.hit, r.score)).collect(),
                fusion,
            )
            .into_iter()
            .map(|(_, hit)| hit)
            .collect();
            assert_eq!(fused.len(), 4, "{fusion:?}");
            assert_eq!(fused[0], "a", "{fusion:?}");
        }
    }

    #[test]
    fn equal_scores_are_ordered_by_key() {
        let fused = fuse(
            vec![ranked("b", 1.0)],
            vec![ranked("a", 1.0)],
            Fusion::ReciprocalRank,
        );
        let names: Vec<&str> = fused.iter().map(|(_, hit)| hit.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }
}
