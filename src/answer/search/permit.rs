//! A search's place in the one gate as an answer: `admitted` (a permit, or `BUSY`) and
//! `timed_out` (the answer of a search cancelled at its deadline).

use crate::answer::DaemonContext;
use crate::protocol::{ErrorObject, BUSY, SEARCH_TIMED_OUT};
use crate::search::gate::SearchPermit;

/// A place in the gate as an answer's error: refused or waited too long is `BUSY`.
pub(in crate::answer) async fn admitted(
    context: &DaemonContext,
) -> Result<SearchPermit, ErrorObject> {
    admitted_as(context, false).await
}

/// `admitted` for a query in raw FTS5 syntax when `raw` (`SearchGate::acquire_raw`).
pub(in crate::answer) async fn admitted_as(
    context: &DaemonContext,
    raw: bool,
) -> Result<SearchPermit, ErrorObject> {
    let gate = &context.search_gate;
    let permit = match raw {
        true => gate.acquire_raw().await,
        false => gate.acquire().await,
    };
    permit.map_err(|error| ErrorObject::new(BUSY, error.to_string()))
}

/// The answer to a search cancelled at its deadline (the engine counts it in the gate's
/// activity through its permit).
pub(in crate::answer) fn timed_out(context: &DaemonContext) -> ErrorObject {
    let limit = context.search_gate.limits().timeout;
    ErrorObject::new(
        SEARCH_TIMED_OUT,
        format!("the search ran longer than {limit:?} (search_timeout) and was cancelled; narrow the query"),
    )
}
