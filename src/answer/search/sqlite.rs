//! SQLite's rung of a search: FTS5 over resources, and over tools and prompts, merged by score
//! into one page, on one reader; through the gate within a share of the budget in the daemon, on
//! the database file as it is for the offline CLI.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hits::{merge_search_pages, search_result, searched};
use super::index::can_answer_stale;
use super::permit::{admitted_as, timed_out};
use super::request::{has_uri_flags, parsed, KindsSearch, ParsedSearch};
use crate::answer::{internal, DaemonContext};
use crate::protocol::{self as wire, ErrorObject, SearchParams, INVALID_PARAMS, SEARCH_TIMED_OUT};
use crate::search::SearchIndex;
use crate::store::{self, Reader, StoreError};

/// Runs one SQLite search through the gate (as a raw query's when `raw`): `run` gets a reader
/// and the deadline, the permit's or an earlier one (`share`, a part of the budget:
/// `sqlite_within_share`).
pub(super) async fn gated_read<T, F>(
    context: &DaemonContext,
    share: Option<Instant>,
    raw: bool,
    run: F,
) -> Result<T, ErrorObject>
where
    T: Send + 'static,
    F: FnOnce(&Reader, Instant) -> Result<T, StoreError> + Send + 'static,
{
    let permit = admitted_as(context, raw).await?;
    let deadline = share.map_or(permit.deadline, |share| share.min(permit.deadline));
    let work = permit.work();
    context
        .store
        .read(move |reader| work.measure(|| run(reader, deadline)))
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

/// When the index is behind but holds a consistent earlier catalog (its last commit, or the
/// commit it pinned while it applies a change in batches: `can_answer_stale`), SQLite
/// gets this much of `search_timeout` (half of it, if that is less); past it, that commit
/// answers, saying so (`stale_search`): a common word over a first load of a million rows runs
/// past the whole timeout in SQLite, and no search is to fail because the index is behind.
/// A selective query is answered by SQLite well within it. Half the timeout (1 s) was the
/// share until the soak showed its cost: while the index replaced a re-walk of 1,000,000,
/// a plain search of a common word took 1-1.6 s (1 s of SQLite, then the index), the
/// client's next searches were judged heavy, and two of them waited past the timeout for a slot.
const SQLITE_SHARE_WHILE_BEHIND: Duration = Duration::from_millis(100);

/// SQLite's share of a search's budget while the index is behind (`SQLITE_SHARE_WHILE_BEHIND`).
fn sqlite_share(timeout: Duration) -> Duration {
    SQLITE_SHARE_WHILE_BEHIND.min(timeout / 2)
}

/// Runs `sqlite` (a search through the gate) for an index that cannot answer for the catalog
/// as it stands: with a share of the budget when the index's last commit can answer instead
/// (`None` then means it ran past that share), else with the whole budget.
pub(super) async fn sqlite_within_share<T, F, Fut>(
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
    let share = sqlite_share(context.search_gate.limits().timeout);
    match sqlite(Some(Instant::now() + share)).await {
        Ok(answer) => Ok(Some(answer)),
        Err(error) if error.code == SEARCH_TIMED_OUT => Ok(None),
        Err(error) => Err(error),
    }
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

/// SQLite's answer to a search on one reader, cancelled at `deadline`: resources alone, or its
/// resource and entry full-text indexes merged by score (both negated BM25). An index cursor's
/// position (the index answered the page before) is reached by merging from the start and
/// leaving out what the index had shown.
pub(super) fn sqlite_page(
    reader: &Reader,
    search: ParsedSearch,
    deadline: Option<Instant>,
) -> Result<wire::SearchResult, StoreError> {
    let mut search = match search {
        ParsedSearch::Resources { mut request, .. } => {
            request.deadline = deadline;
            return Ok(sqlite_result(reader.search(&request)?));
        }
        ParsedSearch::Kinds(search) => *search,
    };
    let skip = match search.sqlite_cursor {
        true => 0,
        false => search.index.offset,
    };
    let limit = search.limit + skip;
    let offsets = kinds_offsets(&search);
    if let Some(request) = &mut search.resources {
        request.limit = limit;
        request.deadline = deadline;
    }
    if let Some(request) = &mut search.entries {
        // One more than the page shows, to know whether more follow.
        request.limit = limit + 1;
        request.deadline = deadline;
    }
    let resources = match &search.resources {
        Some(request) => Some(reader.search(request)?),
        None => None,
    };
    let entries = match &search.entries {
        Some(request) => reader.search_entries(request)?,
        None => Vec::new(),
    };
    let mut result = merge_search_pages(resources, entries, offsets, limit);
    result.results.drain(..skip.min(result.results.len()));
    Ok(result)
}

/// `catalog/search` answered by SQLite's full-text indexes alone, on one reader, without a
/// deadline: what the CLI answers from the database file when no daemon runs.
pub fn sqlite_search(
    reader: &Reader,
    mut params: SearchParams,
) -> Result<wire::SearchResult, ErrorObject> {
    let uri_flags = params.uri_flags.take();
    let mut result = sqlite_page(reader, parsed(params)?, None).map_err(searched)?;
    result
        .results
        .retain(|hit| has_uri_flags(uri_flags.as_ref(), hit));
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_gets_a_tenth_of_a_second_while_the_index_is_behind_or_half_a_short_timeout() {
        assert_eq!(
            sqlite_share(Duration::from_secs(2)),
            Duration::from_millis(100)
        );
        assert_eq!(
            sqlite_share(Duration::from_secs(30)),
            Duration::from_millis(100)
        );
        assert_eq!(
            sqlite_share(Duration::from_millis(120)),
            Duration::from_millis(60)
        );
    }
}
