//! `daemon/reload`: a reload asked on the socket, answered with the outcome of a reload that
//! read the configuration file after the request arrived. SIGHUP carries no identity, so a
//! client that signals can only guess which reload was its own; a request is matched to its
//! reload by construction: the daemon's loop takes every request waiting, reads the file once,
//! and answers each of them.

use tokio::sync::{mpsc, oneshot};

use super::{internal, DaemonContext};
use crate::protocol::{ErrorObject, ReloadResult, BUSY};

/// How many `daemon/reload` requests may wait for the next reload; more are refused busy
/// (each waiting request is answered by that one reload, so a longer queue buys nothing).
pub const MAX_WAITING_RELOADS: usize = 64;

/// One request: where its outcome goes.
pub type ReloadRequest = oneshot::Sender<ReloadResult>;

/// The queue the daemon's loop reads requests from, and its sending side for the context.
pub fn reload_queue() -> (mpsc::Sender<ReloadRequest>, mpsc::Receiver<ReloadRequest>) {
    mpsc::channel(MAX_WAITING_RELOADS)
}

/// Every request waiting now, the first included: one reload answers them all.
pub fn waiting_requests(
    first: ReloadRequest,
    queue: &mut mpsc::Receiver<ReloadRequest>,
) -> Vec<ReloadRequest> {
    let mut requests = vec![first];
    while let Ok(request) = queue.try_recv() {
        requests.push(request);
    }
    requests
}

pub(crate) async fn reload(context: &DaemonContext) -> Result<ReloadResult, ErrorObject> {
    let (reply, outcome) = oneshot::channel();
    context
        .reloads
        .try_send(reply)
        .map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => ErrorObject::new(
                BUSY,
                format!("{MAX_WAITING_RELOADS} reloads already wait for the next one; try again"),
            ),
            mpsc::error::TrySendError::Closed(_) => internal("the daemon is stopping"),
        })?;
    outcome
        .await
        .map_err(|_| internal("the daemon stopped before the reload ended"))
}
