//! Searches of resources through the search gate: the derived index when it can answer for the catalog as it stands, else SQLite's FTS5.

use std::sync::Arc;
use std::time::Instant;

use super::{internal, DaemonContext};
use crate::protocol::{self as wire, ErrorObject, BUSY, INVALID_PARAMS, SEARCH_TIMED_OUT};
use crate::search::gate::SearchPermit;
use crate::search::{SearchError, SearchIndex, SearchQuery};
use crate::store::{self, StoreError};

/// Runs a search once the gate admits it, cancelled at the permit's deadline.
pub(crate) async fn gated_search(
    mut request: store::SearchRequest,
    context: &DaemonContext,
) -> Result<store::FullTextPage, ErrorObject> {
    let permit = context
        .search_gate
        .acquire()
        .await
        .map_err(|error| ErrorObject::new(BUSY, error.to_string()))?;
    request.deadline = Some(permit.deadline);
    context
        .store
        .search(request)
        .await
        .map_err(|error| match error {
            StoreError::InvalidQuery(_) => ErrorObject::new(INVALID_PARAMS, error.to_string()),
            StoreError::SearchTimedOut => {
                permit.timed_out();
                let limit = context.search_gate.limits().timeout;
                ErrorObject::new(
                    SEARCH_TIMED_OUT,
                    format!("the search ran longer than {limit:?} (search_timeout) and was cancelled; narrow the query"),
                )
            }
            other => internal(other),
        })
}

/// How long a search waits for the index to apply a swap its caller may already have seen
/// (one committed before the search arrived) before SQLite answers instead.
const INDEX_CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Answers from the derived search index; `Ok(Err(why))` when it cannot answer for the
/// catalog as it stands (repairing, or behind a swap it has not applied yet in time).
pub(crate) async fn search_index(
    index: &Arc<SearchIndex>,
    context: &DaemonContext,
    request: &store::SearchRequest,
) -> Result<Result<IndexAnswer, String>, ErrorObject> {
    let mut query = SearchQuery::new(request.query.clone(), request.limit);
    query.server = request.server.clone();
    query.mime_type = request.mime_type.clone();
    query.kinds = request.kinds.clone();
    query.offset = request.offset;
    query.highlight = request.highlight.clone();
    // The same gate as SQLite's searches: a bounded number at once, each with a deadline.
    let permit = context
        .search_gate
        .acquire()
        .await
        .map_err(|error| ErrorObject::new(BUSY, error.to_string()))?;
    query.time_limit = permit.deadline.saturating_duration_since(Instant::now());
    // Usually one hop off the async threads: the newest generation a reader sees in SQLite,
    // then the search, if the index reflects it (and the in-memory version, which moves on
    // only after the commit that SQLite already shows).
    let wanted = context.store.catalog_version();
    // The permit goes with the search and is given back on the blocking thread the moment
    // the search ends, so the next waiter's search starts without waiting for this task to be
    // scheduled again (with 8 clients on 2 slots, that wait was part of every slot's turn).
    let searched = {
        let (index, query) = (index.clone(), query.clone());
        context
            .store
            .with_index_generation(move |generation| {
                if index.status().serves(wanted, generation) {
                    Ok(searched_within(&index, &query, permit))
                } else {
                    Err(generation)
                }
            })
            .await
            .map_err(internal)?
    };
    let searched = match searched {
        Ok(searched) => searched,
        Err(generation) => {
            // Behind a swap the caller may already have seen: wait for the keeper to apply it
            // (without holding a slot: the permit was dropped with the closure), then search,
            // or let SQLite answer.
            let mut status = index.watch();
            let caught_up = status.wait_for(|status| {
                status.serves(wanted, generation)
                    || status.phase != crate::protocol::IndexPhase::Ready
            });
            let _ = tokio::time::timeout(INDEX_CATCH_UP_WAIT, caught_up).await;
            let now = index.status();
            if !now.serves(wanted, generation) {
                let state = match now.phase {
                    crate::protocol::IndexPhase::Ready => {
                        "catching up with the latest change".to_string()
                    }
                    crate::protocol::IndexPhase::Opening => "opening".to_string(),
                    crate::protocol::IndexPhase::CatchingUp => "catching up".to_string(),
                    crate::protocol::IndexPhase::Rebuilding { percent } => {
                        format!("rebuilding ({percent}%)")
                    }
                    crate::protocol::IndexPhase::Failed => "unavailable (see the log)".to_string(),
                };
                return Ok(Err(format!(
                    "the search index is {state}; answered by SQLite full-text search"
                )));
            }
            let permit = context
                .search_gate
                .acquire()
                .await
                .map_err(|error| ErrorObject::new(BUSY, error.to_string()))?;
            query.time_limit = permit.deadline.saturating_duration_since(Instant::now());
            let index = index.clone();
            tokio::task::spawn_blocking(move || searched_within(&index, &query, permit))
                .await
                .map_err(internal)?
        }
    };
    let page = match searched {
        Ok(page) => page,
        Err(error @ SearchError::InvalidQuery(_)) => {
            return Err(ErrorObject::new(INVALID_PARAMS, error.to_string()))
        }
        Err(SearchError::TimedOut(_)) => {
            let limit = context.search_gate.limits().timeout;
            return Err(ErrorObject::new(
                SEARCH_TIMED_OUT,
                format!("the search ran longer than {limit:?} (search_timeout) and was cancelled; narrow the query"),
            ));
        }
        Err(error @ SearchError::Busy) => return Err(ErrorObject::new(BUSY, error.to_string())),
        // A damaged index must not cost an answer: SQLite has the same catalog.
        Err(error) => {
            tracing::warn!(%error, "the search index failed a search; SQLite answered");
            return Ok(Err(format!(
                "the search index failed ({error}); answered by SQLite full-text search"
            )));
        }
    };
    let hits = page
        .hits
        .into_iter()
        .map(|hit| store::SearchHit {
            kind: hit.kind,
            server: hit.server,
            uri: hit.uri,
            name: hit.name,
            title: hit.title,
            mime_type: hit.mime_type,
            description: hit.description,
            score: f64::from(hit.score),
            snippet: hit.snippet,
        })
        .collect();
    Ok(Ok(IndexAnswer {
        hits,
        next: page.next_offset,
        mode: page.mode,
    }))
}

/// Runs one search of the index under `permit`, counting a timeout, and gives the slot back.
fn searched_within(
    index: &SearchIndex,
    query: &SearchQuery,
    permit: SearchPermit,
) -> Result<crate::search::Page, SearchError> {
    let outcome = index.search(query);
    if matches!(outcome, Err(SearchError::TimedOut(_))) {
        permit.timed_out();
    }
    outcome
}

/// A page of resources from the derived search index.
pub struct IndexAnswer {
    pub hits: Vec<store::SearchHit>,
    pub next: Option<usize>,
    pub mode: crate::protocol::MatchMode,
}

/// The resource part of a search: from the derived index when it can answer for the catalog
/// as it stands, else from SQLite's FTS5 (with the reason in the answer's `note`). The result
/// says which engine answered; `next_cursor` is left to the caller.
pub async fn resource_search(
    request: store::SearchRequest,
    context: &DaemonContext,
) -> Result<(Vec<store::SearchHit>, Option<usize>, wire::SearchResult), ErrorObject> {
    let mut origin = wire::SearchResult {
        results: Vec::new(),
        next_cursor: None,
        engine: Some(wire::SearchEngine::Sqlite),
        match_mode: None,
        note: None,
    };
    if let (Some(index), false) = (&context.search_index, request.raw) {
        match search_index(index, context, &request).await? {
            Ok(answer) => {
                origin.engine = Some(wire::SearchEngine::Index);
                origin.match_mode = Some(answer.mode);
                return Ok((answer.hits, answer.next, origin));
            }
            Err(why) => origin.note = Some(why),
        }
    }
    let page = gated_search(request, context).await?;
    if let Some(behind) = page.note {
        origin.note = Some(match origin.note.take() {
            Some(why) => format!("{why}; {behind}"),
            None => behind,
        });
    }
    Ok((page.hits, page.next, origin))
}
