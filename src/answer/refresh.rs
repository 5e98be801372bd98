//! `catalog/refresh`: walk one server (or all) now, and with `wait` answer after the swap.

use crate::answer::DaemonContext;
use crate::protocol::{self as wire, ErrorObject};
use crate::redact;
use crate::store;
use crate::supervisor::RefreshOutcome;

pub async fn refresh(
    params: wire::RefreshParams,
    context: &DaemonContext,
) -> Result<wire::RefreshResult, ErrorObject> {
    let server = params.server.as_deref();
    let outcomes = context
        .supervisor
        .refresh(server, params.wait.unwrap_or(false))
        .await
        .ok_or_else(|| crate::answer::list::no_such_server(server.unwrap_or("")))?;
    let servers = outcomes
        .into_iter()
        .map(|(name, outcome)| {
            let outcome = match outcome {
                RefreshOutcome::Queued => wire::RefreshOutcome::queued(),
                RefreshOutcome::Walked(Ok(summary)) => wire::RefreshOutcome::settled(
                    refresh_state(summary.state),
                    swap_summary(summary.swap),
                    summary.report.pages,
                    summary.report.duration_ms,
                ),
                // A server's words, bounded (secrets go at the answer's choke point).
                RefreshOutcome::Walked(Err(error)) => {
                    wire::RefreshOutcome::failed(redact::truncate_server_text(&error).into_owned())
                }
            };
            (name, outcome)
        })
        .collect();
    Ok(wire::RefreshResult { servers })
}

fn refresh_state(state: crate::session::SettledState) -> wire::RefreshState {
    match state {
        crate::session::SettledState::Synced => wire::RefreshState::Synced,
        crate::session::SettledState::NoResources => wire::RefreshState::NoResources,
    }
}

fn swap_summary(swap: store::SwapOutcome) -> wire::SwapSummary {
    wire::SwapSummary {
        added: swap.added,
        removed: swap.removed,
        changed: swap.changed,
        resources: swap.resources,
        templates: swap.templates,
    }
}
