//! `catalog/search` by meaning: the query's vector against the semantic index's, alone (`semantic`) or fused with the search index's ranking by words (`hybrid`).

use std::sync::Arc;
use std::time::Duration;

use super::index::{search_index, IndexAnswer};
use super::permit::admitted;
use crate::answer::{internal, DaemonContext};
use crate::protocol::{self as wire, ErrorObject, VectorsState};
use crate::search::SearchIndex;
use crate::semantic::fusion::{fuse, HitKey, Ranked, DEFAULT_FUSION, FUSION_DEPTH};
use crate::semantic::SemanticIndex;
use crate::store;

/// How long a search waits for the vectors to follow a change its caller may already have
/// seen before it is answered by words alone.
const VECTORS_CATCH_UP_WAIT: Duration = Duration::from_secs(1);

pub(crate) enum Outcome {
    /// Ranked as asked (or by SQLite, when the search index could not answer).
    Answered(Result<IndexAnswer, String>),
    /// To be ranked by words, with why when another ranking was asked for.
    Lexical(Option<String>),
}

fn key_of(hit: &store::SearchHit) -> HitKey {
    HitKey {
        kind: hit.kind,
        server: hit.server.clone(),
        identity: match hit.kind {
            wire::Kind::Resource | wire::Kind::Template => hit.uri.clone(),
            wire::Kind::Tool | wire::Kind::Prompt => hit.name.clone(),
        },
    }
}

pub(crate) async fn semantic_search(
    index: &Arc<SearchIndex>,
    context: &DaemonContext,
    request: &store::SearchRequest,
) -> Result<Outcome, ErrorObject> {
    let semantic = context.semantic.as_ref();
    let mode = request.mode.unwrap_or(match semantic {
        Some(_) => wire::SearchMode::Hybrid,
        None => wire::SearchMode::Lexical,
    });
    if mode == wire::SearchMode::Lexical {
        return Ok(Outcome::Lexical(None));
    }
    let Some(semantic) = semantic else {
        return Ok(Outcome::Lexical(Some(
            "no [search] semantic_model is configured; answered lexically".into(),
        )));
    };
    let embedded = semantic.kinds();
    let searched_any =
        request.kinds.is_empty() || request.kinds.iter().any(|kind| embedded.contains(kind));
    if !searched_any {
        return Ok(Outcome::Lexical(Some(
            "none of the kinds searched is embedded (semantic_kinds); answered lexically".into(),
        )));
    }
    let wanted = context.store.catalog_version();
    if semantic.serves(wanted).is_err() {
        // Ready but behind a change: wait a little for the vectors of that change.
        let mut status = semantic.watch();
        let caught_up = status.wait_for(|(status, caught_up)| {
            status.state != VectorsState::Ready || *caught_up >= wanted
        });
        let _ = tokio::time::timeout(VECTORS_CATCH_UP_WAIT, caught_up).await;
        if let Err(why) = semantic.serves(wanted) {
            return Ok(Outcome::Lexical(Some(format!("{why}; answered lexically"))));
        }
    }
    let lexical = match mode {
        wire::SearchMode::Hybrid => {
            let mut deep = request.clone();
            deep.offset = 0;
            deep.limit = FUSION_DEPTH;
            match search_index(index, context, &deep).await? {
                Ok(answer) => Some(answer),
                Err(why) => return Ok(Outcome::Answered(Err(why))),
            }
        }
        _ => None,
    };
    let semantic_list = nearest_hits(context, semantic, request).await?;
    let (ranked, match_mode, note) = match lexical {
        Some(lexical) => {
            let lexical_list = lexical.hits.into_iter().map(ranked).collect();
            (
                fuse(lexical_list, semantic_list, DEFAULT_FUSION),
                lexical.mode,
                lexical.note,
            )
        }
        None => (
            semantic_list
                .into_iter()
                .map(|ranked| (ranked.score, ranked.hit))
                .collect(),
            None,
            None,
        ),
    };
    let total = ranked.len();
    let hits = ranked
        .into_iter()
        .skip(request.offset)
        .take(request.limit)
        .map(|(score, mut hit)| {
            hit.score = score;
            hit
        })
        .collect();
    let end = request.offset.saturating_add(request.limit);
    Ok(Outcome::Answered(Ok(IndexAnswer {
        hits,
        next: (end < total).then_some(end),
        mode: match_mode,
        search_mode: mode,
        note,
    })))
}

/// The entries nearest the question by the model's vectors, `FUSION_DEPTH` of them, as hits:
/// the question embedded and the vectors compared on a blocking thread, under a permit of the
/// one search gate.
async fn nearest_hits(
    context: &DaemonContext,
    semantic: &Arc<SemanticIndex>,
    request: &store::SearchRequest,
) -> Result<Vec<Ranked<store::SearchHit>>, ErrorObject> {
    let permit = admitted(context).await?;
    let nearest = {
        let semantic = semantic.clone();
        let request = request.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let vector = semantic.question_vector(&request.query)?;
            Ok::<_, crate::semantic::SemanticError>(semantic.nearest(
                &vector,
                &request,
                FUSION_DEPTH,
            ))
        })
        .await
        .map_err(internal)?
        .map_err(internal)?
    };
    Ok(nearest
        .into_iter()
        .map(|(similarity, document)| {
            let entry = document.entry;
            ranked(store::SearchHit {
                kind: entry.kind,
                server: entry.server,
                uri: entry.uri,
                name: entry.name,
                title: entry.title,
                mime_type: entry.mime_type,
                description: entry.description,
                score: f64::from(similarity),
                snippet: None,
            })
        })
        .collect())
}

/// A hit as fusion ranks it: by its key and its own score.
fn ranked(hit: store::SearchHit) -> Ranked<store::SearchHit> {
    Ranked {
        key: key_of(&hit),
        score: hit.score,
        hit,
    }
}
