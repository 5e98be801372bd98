//! The search index's rung of a daemon search: the derived index when it reflects the catalog
//! as it stands (waiting a moment for a swap the caller may have seen), ranked by words or, with
//! the local model's vectors, by meaning (`hybrid`); its last commit (or, while a change is
//! applied in batches, the commit pinned before it) when SQLite ran past its share; each search
//! under a permit of the one gate.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hits::{joined_notes, search_result};
use super::permit::{admitted, timed_out};
use crate::answer::{internal, DaemonContext};
use crate::protocol::{self as wire, encode_index_cursor, ErrorObject, BUSY, INVALID_PARAMS};
use crate::search::gate::SearchPermit;
use crate::search::{SearchError, SearchIndex};
use crate::store;

/// How long a search waits for the index to apply a swap its caller may already have seen
/// (one committed before the search arrived) before SQLite answers instead.
const INDEX_CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// The same wait when the index's last commit can answer instead (a large swap, which SQLite's
/// full-text index is behind too): a search during a first load's catch-up is not held a
/// second for an answer that says "previous state" anyway.
const INDEX_CATCH_UP_WAIT_WITH_STALE: std::time::Duration = std::time::Duration::from_millis(50);

/// Answers from the derived search index; `Ok(Err(why))` when it cannot answer for the
/// catalog as it stands (repairing, or behind a swap it has not applied yet in time).
pub(super) async fn search_index(
    index: &Arc<SearchIndex>,
    context: &DaemonContext,
    request: &store::SearchRequest,
) -> Result<Result<IndexAnswer, String>, ErrorObject> {
    search_index_as(index, context, request, false).await
}

/// Whether the index can answer from a consistent earlier catalog while it is behind: its last
/// commit while it is ready, or the commit it pinned while it applies a large change in
/// batches (`SearchIndex::pin`: its last commit then holds part of that change).
pub(super) fn can_answer_stale(index: &SearchIndex) -> bool {
    let status = index.status();
    let consistent = match status.phase {
        crate::search::Phase::Ready => true,
        crate::search::Phase::CatchingUp => status.pinned_generation.is_some(),
        _ => false,
    };
    consistent && status.generation.is_some()
}

/// The index's answer from its last commit, for a search SQLite could not answer within its
/// share (`sqlite_within_share`).
pub(super) async fn stale_search(
    index: &Arc<SearchIndex>,
    context: &DaemonContext,
    request: &store::SearchRequest,
) -> Result<IndexAnswer, ErrorObject> {
    match search_index_as(index, context, request, true).await? {
        Ok(answer) => Ok(answer),
        Err(why) => Err(internal(why)),
    }
}

/// `search_index`; with `stale`, from the index's last commit whatever it reflects.
async fn search_index_as(
    index: &Arc<SearchIndex>,
    context: &DaemonContext,
    request: &store::SearchRequest,
    stale: bool,
) -> Result<Result<IndexAnswer, String>, ErrorObject> {
    let mut note = None;
    let mut query = request.clone();
    // The same gate as SQLite's searches: a bounded number at once, each with a deadline.
    let permit = admitted(context).await?;
    query.deadline = Some(permit.deadline);
    // The newest generation a reader sees in SQLite, then the search, if the index reflects
    // it (and the in-memory version, which moves on only after the commit that SQLite
    // already shows).
    let wanted = context.store.catalog_version();
    // A quick client's search runs here, on the answering thread, for up to `QUICK_BUDGET`;
    // else (or past that) on a blocking thread.
    let searched = match quick_pass(index, context, &query, permit, wanted, stale) {
        Ok(searched) => searched,
        Err(permit) => {
            // The permit goes with the search and is given back on the blocking thread the
            // moment the search ends, so the next waiter's search starts without waiting for
            // this task to be scheduled again (with 8 clients on 2 slots, that wait was part
            // of every slot's turn).
            let (index, query) = (index.clone(), query.clone());
            context
                .store
                .read(move |reader| {
                    let pass = index_pass(&index, reader, &query, &permit, wanted, stale, false);
                    drop(permit);
                    pass
                })
                .await
        }
    }
    .map_err(internal)?;
    // Asked for the last commit, the index may have caught up meanwhile (the longer SQLite
    // tried, the likelier): then it answered for the catalog as it stands, and says nothing of
    // a previous state.
    if let (true, Ok((Ok(page), false))) = (stale, &searched) {
        note = Some(format!(
            "the search index is still indexing a change, and SQLite's full-text search ran past its share of search_timeout; answered from the index's previous state (generation {}), without the entries that change brings",
            page.generation
        ));
    }
    let searched = match searched {
        Ok((searched, _)) => searched,
        Err(generation) => {
            match search_after_catch_up(index, context, query, wanted, generation).await? {
                Ok((searched, stale_note)) => {
                    note = stale_note.or(note);
                    searched
                }
                Err(why) => return Ok(Err(why)),
            }
        }
    };
    Ok(page_or_why(searched, context)?.map(|page| index_answer(page, note)))
}

/// Searches this long on the answering thread are given up and run again on a blocking
/// thread: the longest a quick client's search (`SearchPermit::is_quick`) holds the thread
/// that answers other requests (a selective search of 1,000,000 entries takes 0.1-0.2 ms).
const QUICK_BUDGET: Duration = Duration::from_millis(2);

/// One search of the index against SQLite's generation (`reader`): the page (or the search's
/// error) and whether it answered for the catalog as it stands, or `Err(generation)` when the
/// index is behind that generation (and `stale` does not ask for its last commit anyway).
type Pass = Result<(Result<crate::search::Page, SearchError>, bool), u64>;

fn index_pass(
    index: &SearchIndex,
    reader: &store::Reader,
    query: &store::SearchRequest,
    permit: &SearchPermit,
    wanted: u64,
    stale: bool,
    now: bool,
) -> Result<Pass, store::StoreError> {
    let generation = reader.index_generation()?;
    let current = || index.status().serves(wanted, generation);
    let before = current();
    if !(stale || before) {
        return Ok(Err(generation));
    }
    let page = searched_under(index, query, permit, now);
    // Caught up by the end of the search: its searcher may have been either (the page says
    // which commit answered: a pinned one is older).
    let answered_current = page
        .as_ref()
        .map_or(true, |page| page.generation >= generation);
    Ok(Ok((page, (before || current()) && answered_current)))
}

/// The search on this (answering) thread when its client is quick and a reader and a
/// searcher slot are free now, stopped at `QUICK_BUDGET`; `Err(permit)` when it is to run on
/// a blocking thread instead.
fn quick_pass(
    index: &SearchIndex,
    context: &DaemonContext,
    query: &store::SearchRequest,
    permit: SearchPermit,
    wanted: u64,
    stale: bool,
) -> Result<Result<Pass, store::StoreError>, SearchPermit> {
    if !permit.is_quick() {
        return Err(permit);
    }
    let budget = Instant::now() + QUICK_BUDGET;
    let quick = store::SearchRequest {
        deadline: Some(budget.min(permit.deadline)),
        ..query.clone()
    };
    let pass = context
        .store
        .read_now(|reader| index_pass(index, reader, &quick, &permit, wanted, stale, true));
    match pass {
        // No searcher slot free now, or past the budget, with time left before the permit's
        // deadline: again, on a blocking thread.
        Some(Ok(Ok((Err(SearchError::Busy), _)))) if Instant::now() < permit.deadline => {
            Err(permit)
        }
        Some(Ok(Ok((Err(SearchError::TimedOut(_)), _)))) if Instant::now() < permit.deadline => {
            permit.work().charge(QUICK_BUDGET);
            Err(permit)
        }
        Some(pass) => {
            // Counted when it searched (not when the index was found behind SQLite).
            if matches!(pass, Ok(Ok(_))) {
                permit.answered_in_place();
            }
            Ok(pass)
        }
        // No reader free now.
        None => Err(permit),
    }
}

/// The index's search after a catch-up, and the note when its last commit answered.
type CaughtUp = (Result<crate::search::Page, SearchError>, Option<String>);

/// Behind a swap the caller may already have seen: waits a moment for the keeper to apply it
/// (without holding a slot), then searches with a new permit; the note when the index's last
/// commit answers; `Err(why)` when SQLite answers instead.
async fn search_after_catch_up(
    index: &Arc<SearchIndex>,
    context: &DaemonContext,
    mut query: store::SearchRequest,
    wanted: u64,
    generation: u64,
) -> Result<Result<CaughtUp, String>, ErrorObject> {
    // No slot is held while waiting: the first permit was dropped with the read's closure.
    let mut status = index.watch();
    let caught_up = status.wait_for(|status| {
        status.serves(wanted, generation) || status.phase != crate::protocol::IndexPhase::Ready
    });
    // No wait while the keeper replaces a whole list (a first load, a re-walk that
    // changed much): that takes seconds, and every search waited its whole wait (each
    // search of the 4.5 s after a 1,000,000 first load took 52 ms).
    let wait = if index.status().replacing {
        std::time::Duration::ZERO
    } else if can_answer_stale(index) && context.store.full_text_note().is_some() {
        INDEX_CATCH_UP_WAIT_WITH_STALE
    } else {
        INDEX_CATCH_UP_WAIT
    };
    let _ = tokio::time::timeout(wait, caught_up).await;
    let now = index.status();
    // Behind while SQLite's full-text index is behind a large swap too (SQLite's
    // answer would lack rows as well, and be slow for common words): the index's last
    // commit, a consistent earlier catalog, answers, and says so.
    let stale = !now.serves(wanted, generation)
        && can_answer_stale(index)
        && context.store.full_text_note().is_some();
    if !stale && !now.serves(wanted, generation) {
        let state = index_phase_text(now.phase);
        return Ok(Err(format!(
            "the search index is {state}; answered by SQLite full-text search"
        )));
    }
    let permit = admitted(context).await?;
    query.deadline = Some(permit.deadline);
    let index = index.clone();
    let searched =
        tokio::task::spawn_blocking(move || searched_under(&index, &query, &permit, false))
            .await
            .map_err(internal)?;
    // The generation of the commit that answered: the last one, or the one pinned while a
    // large change is applied in batches (the last then holds part of it).
    let note = match (&searched, stale) {
        (Ok(page), true) if page.generation < generation => Some(format!(
            "the search index is still indexing a change; answered from its previous state (generation {}), without the entries that change brings",
            page.generation
        )),
        _ => None,
    };
    Ok(Ok((searched, note)))
}

/// The index's page, or why SQLite answers (a damaged index), or the error the client gets.
fn page_or_why(
    searched: Result<crate::search::Page, SearchError>,
    context: &DaemonContext,
) -> Result<Result<crate::search::Page, String>, ErrorObject> {
    match searched {
        Ok(page) => Ok(Ok(page)),
        Err(error @ SearchError::InvalidQuery(_)) => {
            Err(ErrorObject::new(INVALID_PARAMS, error.to_string()))
        }
        Err(SearchError::TimedOut(_)) => Err(timed_out(context)),
        Err(error @ SearchError::Busy) => Err(ErrorObject::new(BUSY, error.to_string())),
        // A damaged index must not cost an answer: SQLite has the same catalog.
        Err(error) => {
            tracing::warn!(%error, "the search index failed a search; SQLite answered");
            Ok(Err(format!(
                "the search index failed ({error}); answered by SQLite full-text search"
            )))
        }
    }
}

/// What the index is doing while it cannot answer, for the answer's note.
fn index_phase_text(phase: crate::protocol::IndexPhase) -> String {
    match phase {
        crate::protocol::IndexPhase::Ready => "catching up with the latest change".to_string(),
        crate::protocol::IndexPhase::Opening => "opening".to_string(),
        crate::protocol::IndexPhase::CatchingUp => "catching up".to_string(),
        crate::protocol::IndexPhase::Rebuilding { percent } => {
            format!("rebuilding ({percent}%)")
        }
        crate::protocol::IndexPhase::Failed => "unavailable (see the log)".to_string(),
    }
}

/// The index's page of hits as every engine's hits, with the answer's note.
fn index_answer(page: crate::search::Page, note: Option<String>) -> IndexAnswer {
    IndexAnswer {
        hits: page.hits,
        next: page.next_offset,
        mode: Some(page.mode),
        search_mode: wire::SearchMode::Lexical,
        note,
    }
}

/// Runs one search of the index under `permit` (with `now`, only if a searcher slot is free
/// now: else `Busy`), counting a timeout at the permit's deadline.
fn searched_under(
    index: &SearchIndex,
    query: &store::SearchRequest,
    permit: &SearchPermit,
    now: bool,
) -> Result<crate::search::Page, SearchError> {
    let outcome = permit.work().measure(|| match now {
        true => index.search_now(query),
        false => index.search(query),
    });
    if matches!(outcome, Err(SearchError::TimedOut(_))) && Instant::now() >= permit.deadline {
        permit.timed_out();
    }
    outcome
}

/// A page of resources from the derived search index.
pub(super) struct IndexAnswer {
    pub hits: Vec<store::SearchHit>,
    pub next: Option<usize>,
    /// How the words matched; `None` for a semantic answer.
    pub mode: Option<crate::protocol::MatchMode>,
    /// Which ranking answered.
    pub search_mode: wire::SearchMode,
    /// Why the ranking asked for did not answer (vectors not ready, no model), and why the
    /// index answered from an earlier state, when it did.
    pub note: Option<String>,
}

/// The index's answer ranked as the search asks (`mode`): by words alone, or with the local
/// model's vectors (`semantic`, `hybrid`; see `crate::semantic`) when they are ready for the
/// catalog as it stands; else by words, with the reason in `note`.
pub(super) async fn ranked_search(
    index: &Arc<SearchIndex>,
    context: &DaemonContext,
    request: &store::SearchRequest,
) -> Result<Result<IndexAnswer, String>, ErrorObject> {
    #[cfg(feature = "semantic")]
    let note = match super::hybrid::semantic_search(index, context, request).await? {
        super::hybrid::Outcome::Answered(answer) => return Ok(answer),
        super::hybrid::Outcome::Lexical(note) => note,
    };
    #[cfg(not(feature = "semantic"))]
    let note = match request.mode {
        Some(wire::SearchMode::Semantic | wire::SearchMode::Hybrid) => Some(
            "this mcp-mirror was built without semantic search; answered lexically".to_string(),
        ),
        _ => None,
    };
    let mut answer = search_index(index, context, request).await?;
    if let Ok(answer) = &mut answer {
        answer.note = joined_notes(note, answer.note.take());
    }
    Ok(answer)
}

impl IndexAnswer {
    /// The index's page as the socket answers it, its cursor the index's.
    pub(super) fn into_result(self) -> wire::SearchResult {
        let mut result = search_result(self.hits, None);
        result.next_cursor = self.next.map(encode_index_cursor);
        result.engine = Some(wire::SearchEngine::Index);
        result.match_mode = self.mode;
        result.mode = Some(self.search_mode);
        result.note = self.note;
        result
    }
}
