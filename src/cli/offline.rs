//! Where catalog reads come from: the daemon, or the database file read-only when no daemon
//! runs. Both answer with the socket's types, shaped by the same code.

use std::path::Path;
use std::time::Duration;

use super::client::Client;
use super::ClientError;
use crate::protocol::{
    CatalogResource, CatalogSearch, ListParams, ListResources, ListResourcesResult,
    ResourceDetails, SearchParams, SearchResult, UriParams,
};
use crate::store::{ReadOnlyCatalog, StoreError};

/// Rows per page when listing straight from the database.
const OFFLINE_PAGE_SIZE: usize = 1000;
const LIST_TIMEOUT: Duration = Duration::from_secs(60);
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

pub enum Catalog {
    Daemon(Client),
    Database(ReadOnlyCatalog),
}

fn database_error(error: impl std::fmt::Display) -> ClientError {
    ClientError::Protocol(error.to_string())
}

impl Catalog {
    /// Connects to the daemon; when it cannot be reached, opens `database` read-only and
    /// says so on stderr, so nobody mistakes a possibly stale file for the live mirror.
    pub fn open(socket: &Path, database: &Path) -> Result<Catalog, ClientError> {
        match Client::connect(socket) {
            Ok(client) => Ok(Catalog::Daemon(client)),
            Err(unreachable) => match ReadOnlyCatalog::open(database) {
                Ok(catalog) => {
                    eprintln!(
                        "mcp-mirror: the daemon is not running (no answer at {}); reading the database {} directly, read-only",
                        socket.display(),
                        database.display()
                    );
                    Ok(Catalog::Database(catalog))
                }
                Err(source) => {
                    eprintln!("mcp-mirror: {unreachable}");
                    Err(ClientError::Offline {
                        path: database.to_path_buf(),
                        source,
                    })
                }
            },
        }
    }

    /// One page of the merged catalog (`resources/list`).
    pub fn list_page(&mut self, params: &ListParams) -> Result<ListResourcesResult, ClientError> {
        match self {
            Catalog::Daemon(client) => client.call::<ListResources>(params, Some(LIST_TIMEOUT)),
            Catalog::Database(catalog) => {
                let after = params
                    .after()
                    .map_err(|error| ClientError::Usage(error.to_string()))?;
                let (rows, more) = catalog
                    .list_resources(after.as_deref(), OFFLINE_PAGE_SIZE)
                    .map_err(database_error)?;
                crate::api::resources_page(rows, more).map_err(database_error)
            }
        }
    }

    /// `catalog/search`, with the daemon's defaults and caps either way.
    pub fn search(&mut self, params: SearchParams) -> Result<SearchResult, ClientError> {
        match self {
            Catalog::Daemon(client) => client.call::<CatalogSearch>(&params, Some(QUERY_TIMEOUT)),
            Catalog::Database(catalog) => {
                let request = params
                    .into_request()
                    .map_err(|error| ClientError::Usage(error.to_string()))?;
                let (hits, next) = catalog.search(&request).map_err(|error| match error {
                    StoreError::InvalidQuery(_) => ClientError::Usage(error.to_string()),
                    other => database_error(other),
                })?;
                Ok(crate::api::search_result(hits, next))
            }
        }
    }

    /// Everything known about one URI (`catalog/resource`).
    pub fn resource(&mut self, uri: &str) -> Result<ResourceDetails, ClientError> {
        match self {
            Catalog::Daemon(client) => {
                client.call::<CatalogResource>(&UriParams { uri: uri.into() }, Some(QUERY_TIMEOUT))
            }
            Catalog::Database(catalog) => {
                let listings = catalog.listings(uri).map_err(database_error)?;
                crate::api::resource_details(listings)
                    .map_err(database_error)?
                    .ok_or_else(|| ClientError::NotFound(format!("no mirrored server lists {uri}")))
            }
        }
    }
}
