//! `catalog_search`: the params parsed once, the view's servers put in the request, the ladder run under the gate, the hits the view sees.

use super::hits::joined_notes;
use super::index::{ranked_search, stale_search};
use super::request::{has_uri_flags, parsed, ParsedSearch};
use super::sqlite::{gated_read, sqlite_page, sqlite_within_share};
use crate::answer::{internal, DaemonContext, View};
use crate::protocol::{self as wire, ErrorObject, SearchParams};

/// `catalog/search`: a search of several kinds, or of resources alone, from the derived index
/// when it can answer for the catalog as it stands, else from SQLite (a cursor
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
    let mut result = daemon_search(context, search).await?;
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

/// The one ladder of every daemon search: the derived index when it can answer for the catalog
/// as it stands (not for raw syntax, nor for a cursor of SQLite's, whose ranking is another);
/// else SQLite, within a share of the budget when the index's last commit can answer instead;
/// past that share, the index's last commit, saying so. The answer says which engine answered
/// and why the index did not, and its cursor is that engine's.
async fn daemon_search(
    context: &DaemonContext,
    search: ParsedSearch,
) -> Result<wire::SearchResult, ErrorObject> {
    let (request, sqlite_cursor) = match &search {
        ParsedSearch::Kinds(kinds) => (kinds.index.clone(), kinds.sqlite_cursor),
        ParsedSearch::Resources {
            request,
            sqlite_cursor,
        } => ((**request).clone(), *sqlite_cursor),
    };
    let use_index = !sqlite_cursor && !request.raw;
    let index = context.search_index.as_ref().filter(|_| use_index);
    let mut why_not_index = None;
    if let Some(index) = index {
        match ranked_search(index, context, &request).await? {
            Ok(answer) => return Ok(answer.into_result()),
            Err(why) => why_not_index = Some(why),
        }
    }
    let raw = request.raw;
    let sqlite = |share| {
        gated_read(context, share, raw, move |reader, deadline| {
            sqlite_page(reader, search, Some(deadline))
        })
    };
    match (sqlite_within_share(index, context, sqlite).await?, index) {
        (Some(mut result), _) => {
            result.note = joined_notes(why_not_index, result.note.take());
            Ok(result)
        }
        (None, Some(index)) => Ok(stale_search(index, context, &request).await?.into_result()),
        (None, None) => Err(internal("no search engine answered")),
    }
}

/// The view's rule for one hit: its server and kind, and its URI when the view hides
/// flagged ones.
fn view_sees_hit(view: &View, hit: &wire::SearchHit) -> bool {
    match &hit.uri {
        Some(uri) => view.sees_uri(&hit.server, hit.kind, uri),
        None => view.sees(&hit.server, hit.kind),
    }
}
