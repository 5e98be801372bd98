//! `catalog/resource`: everything known about one URI, and the "not listed" error of a URI no
//! server lists.

use crate::protocol::{self as wire, ErrorData, ErrorObject, Kind, RESOURCE_NOT_FOUND};
use crate::store::Reader;

use super::{internal, View};

/// MCP's "resource not found" for a URI no mirrored server lists.
pub fn not_listed(uri: &str) -> ErrorObject {
    ErrorObject::new(
        RESOURCE_NOT_FOUND,
        format!("resource not found: no mirrored server lists {uri}"),
    )
    .with_data(ErrorData {
        uri: Some(uri.into()),
        ..ErrorData::default()
    })
}

/// The winner (first listing the view sees) with its origin, and every listing the view sees;
/// `not_listed` when none.
pub fn details(
    reader: &Reader,
    uri: &str,
    view: &View,
) -> Result<wire::ResourceDetails, ErrorObject> {
    let mut listings = reader.listings(uri).map_err(internal)?;
    listings.retain(|listing| view.sees_entry(&listing.server, Kind::Resource, &listing.raw));
    let Some(winner) = listings.first() else {
        return Err(not_listed(uri));
    };
    let resource =
        wire::Resource::from_stored(&winner.raw, Some(&winner.server)).map_err(internal)?;
    let (server, stale, snapshot_at_ms) =
        (winner.server.clone(), winner.stale, winner.snapshot_at_ms);
    let listed_by = listings
        .into_iter()
        .map(|listing| {
            Ok(wire::Listing {
                resource: wire::Resource::from_stored(&listing.raw, None)?,
                server: listing.server,
                priority: listing.priority,
            })
        })
        .collect::<Result<_, serde_json::Error>>()
        .map_err(internal)?;
    Ok(wire::ResourceDetails {
        server,
        resource,
        stale,
        snapshot_at_ms,
        listed_by,
    })
}
