//! `catalog/search` in one place: the request (`request`), the engine chosen for it (the
//! derived index when it can answer for the catalog as it stands, else SQLite's FTS5, both
//! through the one search gate), the kinds merged, and the hits shaped (`hits`). The offline
//! CLI's SQLite-only answer on a `Reader` is here too.

mod hits;
#[cfg(feature = "semantic")]
mod hybrid;
mod request;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

pub use hits::{merge_search_pages, search_result, searched};
pub use request::KindsSearch;

use super::{internal, invalid_params, DaemonContext, View};
use crate::protocol::uri_flags::{flags_of_listing, UriFlagFilter};
use crate::protocol::{
    self as wire, encode_index_cursor, ErrorObject, SearchParams, BUSY, INVALID_PARAMS,
    SEARCH_TIMED_OUT,
};
use crate::search::gate::SearchPermit;
use crate::search::{SearchError, SearchIndex};
use crate::store::{self, Reader, StoreError};

/// `catalog/search`: a search of several kinds (`search_kinds`), or of resources alone from the
/// derived index when it can answer for the catalog as it stands, else from SQLite (a cursor
/// stays with the engine that made it); every answer is counted in the search histogram. The
/// hits are those the view sees. The socket, the HTTP face, the stdio bridge and the
/// `search_catalog` tool all come through here.
pub(crate) async fn catalog_search(
    context: &DaemonContext,
    mut params: SearchParams,
    view: &View,
) -> Result<wire::SearchResult, ErrorObject> {
    // Every answer counts, refusals and timeouts too: they are latency a client saw.
    let started = std::time::Instant::now();
    let cut = params.cut_words_note();
    let uri_flags = params.uri_flags.take();
    let outcome = search_in_view(context, params, view).await;
    crate::metrics::observe_search(started.elapsed());
    let mut result = outcome?;
    result.note = joined_notes(result.note.take(), cut);
    result
        .results
        .retain(|hit| has_uri_flags(uri_flags.as_ref(), hit));
    Ok(result)
}

/// A search as the view sees it. A view that does not see every server searches the listings
/// of those it does (`SearchRequest::servers`), and of each URI or URI template keeps the
/// listing of the server that wins it among them, as its merged catalog does (`catalog/search`
/// answers like `resources/list`); every hit is one the view sees.
async fn search_in_view(
    context: &DaemonContext,
    params: SearchParams,
    view: &View,
) -> Result<wire::SearchResult, ErrorObject> {
    let kinds = params
        .kinds
        .clone()
        .unwrap_or_else(|| wire::Kind::ALL.to_vec());
    let one_server = params.server.is_some();
    let mut search = parsed(params)?;
    let within = match view.is_owner() || one_server {
        true => None,
        false => {
            let names = context
                .store
                .read(|reader| reader.server_names())
                .await
                .map_err(internal)?;
            view.searched_servers(&names, &kinds)
        }
    };
    if let Some(servers) = &within {
        search.within(servers);
    }
    let mut result = search_for_params(context, search).await?;
    result.results.retain(|hit| view_sees_hit(view, hit));
    if within.is_some() {
        keep_view_winners(context, view, &mut result.results).await?;
    }
    Ok(result)
}

/// Keeps of each resource's URI and template's URI template the hit of the server that wins it
/// among the servers the view sees (hits of tools and prompts, one server's each, all stay).
async fn keep_view_winners(
    context: &DaemonContext,
    view: &View,
    hits: &mut Vec<wire::SearchHit>,
) -> Result<(), ErrorObject> {
    use wire::Kind;
    let keys = |kind: Kind| -> Vec<String> {
        hits.iter()
            .filter(|hit| hit.kind == kind)
            .filter_map(|hit| hit.uri.clone())
            .collect()
    };
    let (resources, templates) = (keys(Kind::Resource), keys(Kind::Template));
    let view = view.clone();
    let winners = context
        .store
        .read(move |reader| {
            let winners_of = |kind: Kind, keys: &[String]| {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                reader.winners_among(kind, &keys, &|server| view.sees(server, kind))
            };
            Ok((
                winners_of(Kind::Resource, &resources)?,
                winners_of(Kind::Template, &templates)?,
            ))
        })
        .await
        .map_err(internal)?;
    hits.retain(|hit| {
        let winner = |winners: &std::collections::HashMap<String, String>| {
            hit.uri.as_ref().and_then(|uri| winners.get(uri)) == Some(&hit.server)
        };
        match hit.kind {
            Kind::Resource => winner(&winners.0),
            Kind::Template => winner(&winners.1),
            Kind::Tool | Kind::Prompt => true,
        }
    });
    Ok(())
}

/// Whether a hit passes the request's `uriFlags` filter (every hit when there is none). Like
/// the view, it filters the ranked page: a page may hold fewer hits than `limit`, and the
/// cursor goes on past what it left out.
fn has_uri_flags(filters: Option<&BTreeSet<UriFlagFilter>>, hit: &wire::SearchHit) -> bool {
    filters.map_or(true, |filters| {
        let flags = flags_of_listing(hit.kind, hit.uri.as_deref().unwrap_or_default());
        UriFlagFilter::keeps(filters, &flags)
    })
}

/// A search's params read once, for the daemon and the offline CLI alike.
enum ParsedSearch {
    /// Tools, prompts or templates among the kinds.
    Kinds(Box<KindsSearch>),
    /// Resources alone; `sqlite_cursor` when its cursor is SQLite's (it stays with SQLite:
    /// the two rank differently).
    Resources {
        request: Box<store::SearchRequest>,
        sqlite_cursor: bool,
    },
}

impl ParsedSearch {
    /// Searches the listings of `servers` only, each listing (`SearchRequest::servers`).
    fn within(&mut self, servers: &BTreeSet<String>) {
        let requests: Vec<&mut store::SearchRequest> = match self {
            ParsedSearch::Kinds(search) => {
                let KindsSearch {
                    index,
                    resources,
                    entries,
                    ..
                } = search.as_mut();
                std::iter::once(index)
                    .chain(resources.as_mut())
                    .chain(entries.as_mut())
                    .collect()
            }
            ParsedSearch::Resources { request, .. } => vec![request.as_mut()],
        };
        for request in requests {
            request.servers = Some(servers.clone());
        }
    }
}

fn parsed(params: SearchParams) -> Result<ParsedSearch, ErrorObject> {
    if params.searches_entries() {
        return Ok(ParsedSearch::Kinds(Box::new(
            params.into_kinds_request().map_err(invalid_params)?,
        )));
    }
    let sqlite_cursor = params.cursor.as_deref().map(wire::is_index_cursor) == Some(false);
    Ok(ParsedSearch::Resources {
        request: Box::new(params.into_request().map_err(invalid_params)?),
        sqlite_cursor,
    })
}

/// SQLite's page of resources as the socket answers it, its note kept.
fn sqlite_result(page: store::FullTextPage) -> wire::SearchResult {
    let mut result = search_result(page.hits, page.next);
    result.note = page.note;
    result
}

/// How many resources and entries the pages before a search of several kinds showed.
fn kinds_offsets(search: &KindsSearch) -> (usize, usize) {
    let offset =
        |request: Option<&store::SearchRequest>| request.map_or(0, |request| request.offset);
    (
        offset(search.resources.as_ref()),
        offset(search.entries.as_ref()),
    )
}

/// The engine a parsed search asks for: several kinds, or resources alone.
async fn search_for_params(
    context: &DaemonContext,
    search: ParsedSearch,
) -> Result<wire::SearchResult, ErrorObject> {
    match search {
        ParsedSearch::Kinds(search) => search_kinds(*search, context).await,
        ParsedSearch::Resources {
            request,
            sqlite_cursor: true,
        } => Ok(sqlite_result(gated_search(*request, context).await?)),
        ParsedSearch::Resources { request, .. } => resource_search(*request, context).await,
    }
}

/// Two notes as one, either or both absent.
fn joined_notes(first: Option<String>, second: Option<String>) -> Option<String> {
    match (first, second) {
        (Some(first), Some(second)) => Some(format!("{first}; {second}")),
        (first, second) => first.or(second),
    }
}

/// A place in the gate as an answer's error: refused or waited too long is `BUSY`.
async fn admitted(context: &DaemonContext) -> Result<SearchPermit, ErrorObject> {
    context
        .search_gate
        .acquire()
        .await
        .map_err(|error| ErrorObject::new(BUSY, error.to_string()))
}

/// The answer to a search cancelled at its deadline (the engine counts it in the gate's
/// activity through its permit).
fn timed_out(context: &DaemonContext) -> ErrorObject {
    let limit = context.search_gate.limits().timeout;
    ErrorObject::new(
        SEARCH_TIMED_OUT,
        format!("the search ran longer than {limit:?} (search_timeout) and was cancelled; narrow the query"),
    )
}

/// Runs one SQLite search through the gate: `run` gets a reader and the deadline, the
/// permit's or an earlier one (`share`, a part of the budget: `sqlite_within_share`).
async fn gated_read<T, F>(
    context: &DaemonContext,
    share: Option<Instant>,
    run: F,
) -> Result<T, ErrorObject>
where
    T: Send + 'static,
    F: FnOnce(&Reader, Instant) -> Result<T, StoreError> + Send + 'static,
{
    let permit = admitted(context).await?;
    let deadline = share.map_or(permit.deadline, |share| share.min(permit.deadline));
    context
        .store
        .read(move |reader| run(reader, deadline))
        .await
        .map_err(|error| match error {
            StoreError::InvalidQuery(_) => ErrorObject::new(INVALID_PARAMS, error.to_string()),
            StoreError::SearchTimedOut => {
                permit.timed_out();
                timed_out(context)
            }
            other => internal(other),
        })
}

/// Runs a search of resources once the gate admits it, cancelled at the permit's deadline.
pub(crate) async fn gated_search(
    mut request: store::SearchRequest,
    context: &DaemonContext,
) -> Result<store::FullTextPage, ErrorObject> {
    // A deadline set before (a share of the budget, `sqlite_within_share`) only shortens it.
    let share = request.deadline.take();
    gated_read(context, share, move |reader, deadline| {
        request.deadline = Some(deadline);
        reader.search(&request)
    })
    .await
}

/// How long a search waits for the index to apply a swap its caller may already have seen
/// (one committed before the search arrived) before SQLite answers instead.
const INDEX_CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// The same wait when the index's last commit can answer instead (a large swap, which SQLite's
/// full-text index is behind too): a search during a first load's catch-up is not held a
/// second for an answer that says "previous state" anyway.
const INDEX_CATCH_UP_WAIT_WITH_STALE: std::time::Duration = std::time::Duration::from_millis(50);

/// Answers from the derived search index; `Ok(Err(why))` when it cannot answer for the
/// catalog as it stands (repairing, or behind a swap it has not applied yet in time).
pub(crate) async fn search_index(
    index: &Arc<SearchIndex>,
    context: &DaemonContext,
    request: &store::SearchRequest,
) -> Result<Result<IndexAnswer, String>, ErrorObject> {
    search_index_as(index, context, request, false).await
}

/// When the index is behind but holds a consistent earlier catalog (its last commit), SQLite
/// gets this share of `search_timeout`; past it, that commit answers, saying so
/// (`answer_or_stale`): a common word over a first load of a million rows runs past the whole
/// timeout in SQLite, and no search is to fail because the index is behind.
const SQLITE_SHARE_WHILE_BEHIND: u32 = 2;

/// Whether the index can answer from its last commit while it is behind.
pub(crate) fn can_answer_stale(index: &SearchIndex) -> bool {
    let status = index.status();
    status.phase == crate::search::Phase::Ready && status.generation.is_some()
}

/// Runs `sqlite` (a search through the gate) for an index that cannot answer for the catalog
/// as it stands: with a share of the budget when the index's last commit can answer instead
/// (`None` then means it ran past that share), else with the whole budget.
pub(crate) async fn sqlite_within_share<T, F, Fut>(
    index: Option<&Arc<SearchIndex>>,
    context: &DaemonContext,
    sqlite: F,
) -> Result<Option<T>, ErrorObject>
where
    F: FnOnce(Option<Instant>) -> Fut,
    Fut: std::future::Future<Output = Result<T, ErrorObject>>,
{
    if !index.is_some_and(|index| can_answer_stale(index)) {
        return sqlite(None).await.map(Some);
    }
    let share = context.search_gate.limits().timeout / SQLITE_SHARE_WHILE_BEHIND;
    match sqlite(Some(Instant::now() + share)).await {
        Ok(answer) => Ok(Some(answer)),
        Err(error) if error.code == SEARCH_TIMED_OUT => Ok(None),
        Err(error) => Err(error),
    }
}

/// The index's answer from its last commit, for a search SQLite could not answer within its
/// share (`sqlite_within_share`).
pub(crate) async fn stale_search(
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
/// The view's rule for one hit: its server and kind, and its URI when the view hides
/// flagged ones.
fn view_sees_hit(view: &View, hit: &wire::SearchHit) -> bool {
    match &hit.uri {
        Some(uri) => view.sees_uri(&hit.server, hit.kind, uri),
        None => view.sees(&hit.server, hit.kind),
    }
}

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
            .read(move |reader| {
                let generation = reader.index_generation()?;
                Ok(if stale || index.status().serves(wanted, generation) {
                    Ok(searched_within(&index, &query, permit))
                } else {
                    Err(generation)
                })
            })
            .await
            .map_err(internal)?
    };
    if stale {
        note = Some(format!(
            "the search index is still indexing a change, and SQLite's full-text search ran past its share of search_timeout; answered from the index's previous state (generation {}), without the entries that change brings",
            index.generation().unwrap_or(0)
        ));
    }
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
            let wait = match can_answer_stale(index) && context.store.full_text_note().is_some() {
                true => INDEX_CATCH_UP_WAIT_WITH_STALE,
                false => INDEX_CATCH_UP_WAIT,
            };
            let _ = tokio::time::timeout(wait, caught_up).await;
            let now = index.status();
            // Behind while SQLite's full-text index is behind a large swap too (SQLite's
            // answer would lack rows as well, and be slow for common words): the index's last
            // commit, a consistent earlier catalog, answers, and says so.
            let stale = !now.serves(wanted, generation)
                && can_answer_stale(index)
                && context.store.full_text_note().is_some();
            if stale {
                note = Some(format!(
                    "the search index is still indexing a change; answered from its previous state (generation {}), without the entries that change brings",
                    now.generation.unwrap_or(0)
                ));
            } else if !now.serves(wanted, generation) {
                let state = index_phase_text(now.phase);
                return Ok(Err(format!(
                    "the search index is {state}; answered by SQLite full-text search"
                )));
            }
            let permit = admitted(context).await?;
            query.deadline = Some(permit.deadline);
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
        Err(SearchError::TimedOut(_)) => return Err(timed_out(context)),
        Err(error @ SearchError::Busy) => return Err(ErrorObject::new(BUSY, error.to_string())),
        // A damaged index must not cost an answer: SQLite has the same catalog.
        Err(error) => {
            tracing::warn!(%error, "the search index failed a search; SQLite answered");
            return Ok(Err(format!(
                "the search index failed ({error}); answered by SQLite full-text search"
            )));
        }
    };
    Ok(Ok(index_answer(page, note)))
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

/// Runs one search of the index under `permit`, counting a timeout, and gives the slot back.
fn searched_within(
    index: &SearchIndex,
    query: &store::SearchRequest,
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
pub(crate) async fn ranked_search(
    index: &Arc<SearchIndex>,
    context: &DaemonContext,
    request: &store::SearchRequest,
) -> Result<Result<IndexAnswer, String>, ErrorObject> {
    #[cfg(feature = "semantic")]
    let note = match hybrid::semantic_search(index, context, request).await? {
        hybrid::Outcome::Answered(answer) => return Ok(answer),
        hybrid::Outcome::Lexical(note) => note,
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
    fn into_result(self) -> wire::SearchResult {
        let mut result = search_result(self.hits, None);
        result.next_cursor = self.next.map(encode_index_cursor);
        result.engine = Some(wire::SearchEngine::Index);
        result.match_mode = self.mode;
        result.mode = Some(self.search_mode);
        result.note = self.note;
        result
    }
}

/// Which rung of the ladder answered.
enum Rung<T> {
    Index(IndexAnswer),
    /// SQLite's answer, and why the index did not answer (`None` when it was not asked).
    Sqlite(T, Option<String>),
}

/// The one ladder of every daemon search: the derived index when it can answer for the
/// catalog as it stands (`use_index`: not for raw syntax or a SQLite cursor); else SQLite
/// (`sqlite`, given the deadline of its share), within a share of the budget when the index's
/// last commit can answer instead; past that share, the index's last commit, saying so.
async fn ladder<T, F, Fut>(
    context: &DaemonContext,
    request: &store::SearchRequest,
    use_index: bool,
    sqlite: F,
) -> Result<Rung<T>, ErrorObject>
where
    F: FnOnce(Option<Instant>) -> Fut,
    Fut: std::future::Future<Output = Result<T, ErrorObject>>,
{
    let index = context.search_index.as_ref().filter(|_| use_index);
    let mut why_not_index = None;
    if let Some(index) = index {
        match ranked_search(index, context, request).await? {
            Ok(answer) => return Ok(Rung::Index(answer)),
            Err(why) => why_not_index = Some(why),
        }
    }
    match (sqlite_within_share(index, context, sqlite).await?, index) {
        (Some(answer), _) => Ok(Rung::Sqlite(answer, why_not_index)),
        (None, Some(index)) => Ok(Rung::Index(stale_search(index, context, request).await?)),
        (None, None) => Err(internal("no search engine answered")),
    }
}

/// The resource part of a search: from the derived index when it can answer for the catalog
/// as it stands, else from SQLite's FTS5 (with the reason in the answer's `note`). The result
/// says which engine answered, and its cursor is that engine's.
pub async fn resource_search(
    request: store::SearchRequest,
    context: &DaemonContext,
) -> Result<wire::SearchResult, ErrorObject> {
    let use_index = !request.raw;
    let sqlite = |share| {
        let mut request = request.clone();
        request.deadline = share;
        async move { gated_search(request, context).await }
    };
    match ladder(context, &request, use_index, sqlite).await? {
        Rung::Index(answer) => Ok(answer.into_result()),
        Rung::Sqlite(page, why_not_index) => {
            let mut result = sqlite_result(page);
            result.note = joined_notes(why_not_index, result.note.take());
            Ok(result)
        }
    }
}

/// `catalog/search` of several kinds: one ranked query of the derived search index, every
/// kind in it and the kinds an index filter, when the index can answer for the catalog as it
/// stands; else SQLite, whose resource and entry full-text indexes are merged by score (both
/// negated BM25), with the reason in `note`. A cursor stays with the engine that made it,
/// except that an index cursor is continued by SQLite when the index cannot answer.
pub async fn search_kinds(
    search: KindsSearch,
    context: &DaemonContext,
) -> Result<wire::SearchResult, ErrorObject> {
    let use_index = !search.sqlite_cursor && !search.index.raw;
    let request = search.index.clone();
    let sqlite = |share| {
        let mut search = search;
        if let Some(resources) = &mut search.resources {
            resources.deadline = share;
        }
        sqlite_kinds_search(search, context)
    };
    match ladder(context, &request, use_index, sqlite).await? {
        Rung::Index(answer) => Ok(answer.into_result()),
        Rung::Sqlite(mut result, why_not_index) => {
            result.note = why_not_index;
            Ok(result)
        }
    }
}

/// The SQLite side of a search of several kinds: the resource page and the tool and prompt
/// hits merged into one page. An index cursor's position (the index was there for the page
/// before) is reached by merging from the start and leaving out what it had shown.
async fn sqlite_kinds_search(
    mut search: KindsSearch,
    context: &DaemonContext,
) -> Result<wire::SearchResult, ErrorObject> {
    let skip = if search.sqlite_cursor {
        0
    } else {
        search.index.offset
    };
    let limit = search.limit + skip;
    if let Some(request) = &mut search.resources {
        request.limit = limit;
    }
    if let Some(request) = &mut search.entries {
        request.limit = limit + 1;
    }
    let offsets = kinds_offsets(&search);
    let resources = match search.resources {
        Some(request) => Some(gated_search(request, context).await?),
        None => None,
    };
    let entries = gated_entry_search(search.entries, context).await?;
    let mut result = merge_search_pages(resources, entries, offsets, limit);
    result.results.drain(..skip.min(result.results.len()));
    Ok(result)
}

/// Runs a search of tools and prompts once the gate admits it, cancelled at the permit's
/// deadline; none when neither is searched.
async fn gated_entry_search(
    search: Option<store::SearchRequest>,
    context: &DaemonContext,
) -> Result<Vec<store::SearchHit>, ErrorObject> {
    let Some(mut search) = search else {
        return Ok(Vec::new());
    };
    gated_read(context, None, move |reader, deadline| {
        search.deadline = Some(deadline);
        reader.search_entries(&search)
    })
    .await
}

/// `catalog/search` answered by SQLite's full-text indexes alone, on one reader, without a
/// deadline: what the CLI answers from the database file when no daemon runs.
pub fn sqlite_search(
    reader: &Reader,
    mut params: SearchParams,
) -> Result<wire::SearchResult, ErrorObject> {
    let uri_flags = params.uri_flags.take();
    let mut result = sqlite_search_page(reader, params)?;
    result
        .results
        .retain(|hit| has_uri_flags(uri_flags.as_ref(), hit));
    Ok(result)
}

fn sqlite_search_page(
    reader: &Reader,
    params: SearchParams,
) -> Result<wire::SearchResult, ErrorObject> {
    let search = match parsed(params)? {
        ParsedSearch::Resources { request, .. } => {
            return Ok(sqlite_result(reader.search(&request).map_err(searched)?))
        }
        ParsedSearch::Kinds(search) => *search,
    };
    let offsets = kinds_offsets(&search);
    let resources = match &search.resources {
        Some(request) => Some(reader.search(request).map_err(searched)?),
        None => None,
    };
    let entries = match &search.entries {
        Some(request) => reader.search_entries(request).map_err(searched)?,
        None => Vec::new(),
    };
    Ok(merge_search_pages(
        resources,
        entries,
        offsets,
        search.limit,
    ))
}
