//! Reading ahead for a client that pages through a list. A client paging reads one page,
//! takes it in, then asks for the next with the cursor it was given: the daemon and the client
//! take turns, and one core idles while the other works. After a page with a next cursor the
//! socket reads that next page at once, on another thread, while the client takes in this one,
//! and answers with it when the client asks for exactly that page, if the catalog's generation
//! has not moved since it was read (the same test the HTTP face's validators make: a page
//! handed over is the page a read at the moment of the request would give).
//!
//! One page at most is read ahead for each connection; any other request drops it.

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::Value;
use tokio::task::JoinHandle;

use super::dispatch::answer_method;
use super::ConnectionState;
use crate::answer::DaemonContext;
use crate::protocol::ErrorObject;

/// The next page of a paged answer, being read.
pub(crate) struct Readahead {
    method: String,
    /// The params the client will send for it: the last page's, with the next cursor.
    params: Value,
    page: JoinHandle<Option<ReadPage>>,
}

/// A page read ahead: its result text, the generation it was read at, its own next cursor.
struct ReadPage {
    text: Box<RawValue>,
    generation: u64,
    next_cursor: Option<String>,
}

impl Readahead {
    /// Starts reading the page after the answer just given to `method` with `params`, when
    /// that answer was a page with more after it (`state.answered_next_cursor`).
    pub(super) fn after(
        method: &str,
        params: &Value,
        state: &ConnectionState,
        context: &Arc<DaemonContext>,
    ) -> Option<Readahead> {
        let cursor = state.answered_next_cursor.clone()?;
        let mut params = match params {
            Value::Object(fields) => fields.clone(),
            _ => serde_json::Map::new(),
        };
        params.insert("cursor".into(), Value::String(cursor));
        let params = Value::Object(params);
        let mut reading = ConnectionState {
            local: state.local,
            view: state.view.clone(),
            search_client: state.search_client.clone(),
            ..ConnectionState::default()
        };
        let (context, method_name, sent) = (context.clone(), method.to_string(), params.clone());
        let page = tokio::spawn(async move {
            let text = answer_method(&method_name, sent, &context, &mut reading)
                .await
                .ok()?;
            Some(ReadPage {
                text,
                generation: reading.answered_generation?,
                next_cursor: reading.answered_next_cursor,
            })
        });
        Some(Readahead {
            method: method.to_string(),
            params,
            page,
        })
    }

    /// The answer to `method` with `params` from the page read ahead, when it is that page and
    /// the catalog has not moved since; `None` sends the request the usual way.
    pub(super) async fn answer(
        mut self,
        method: &str,
        params: &Value,
        context: &DaemonContext,
        state: &mut ConnectionState,
    ) -> Option<Result<Box<RawValue>, ErrorObject>> {
        if method != self.method || *params != self.params {
            return None;
        }
        let page = (&mut self.page).await.ok().flatten()?;
        let now = context
            .store
            .read(|reader| reader.catalog_generation())
            .await
            .ok()?;
        if now != page.generation {
            return None;
        }
        state.answered_generation = Some(page.generation);
        state.answered_next_cursor = page.next_cursor;
        Some(Ok(page.text))
    }
}

impl Drop for Readahead {
    /// A page the client did not ask for is not read on (the read already on a blocking thread
    /// ends by itself; its answer is dropped).
    fn drop(&mut self) {
        self.page.abort();
    }
}
