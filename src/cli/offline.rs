//! Where catalog reads come from: the daemon, or the database file read-only when no daemon
//! runs. Both answer with the socket's types, shaped by the same code.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::client::Client;
use super::ClientError;
use crate::protocol::{
    socket_record_path, CatalogList, CatalogPrompt, CatalogPrompts, CatalogResource, CatalogSearch,
    CatalogTool, CatalogTools, EntriesParams, EntryDetails, EntryParams, InvalidParams, Kind,
    ListParams, ListResources, ListResourcesResult, ListTemplates, ListTemplatesResult,
    ResourceDetails, SearchParams, SearchResult, ServerListParams, ServerListResult, SocketRecord,
    UriParams,
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
    /// Connects to the daemon; when it cannot be reached, opens its database read-only and
    /// says so on stderr, so nobody mistakes a possibly stale file for the live mirror.
    pub fn open(socket: &Path, database: &DatabaseChoice) -> Result<Catalog, ClientError> {
        match Client::connect(socket) {
            Ok(client) => Ok(Catalog::Daemon(client)),
            Err(unreachable) => {
                let database = database.resolve(socket).inspect_err(|_| {
                    eprintln!("mcp-mirror: {unreachable}");
                })?;
                Catalog::open_database(socket, &database, unreachable)
            }
        }
    }

    /// Opens `database` read-only; `unreachable` is why the daemon could not answer.
    fn open_database(
        socket: &Path,
        database: &Path,
        unreachable: ClientError,
    ) -> Result<Catalog, ClientError> {
        match ReadOnlyCatalog::open(database) {
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
                typed(&crate::socket::resources_page(&rows, more)).map_err(database_error)
            }
        }
    }

    /// `catalog/search`, with the daemon's defaults and caps either way.
    pub fn search(&mut self, params: SearchParams) -> Result<SearchResult, ClientError> {
        match self {
            Catalog::Daemon(client) => client.call::<CatalogSearch>(&params, Some(QUERY_TIMEOUT)),
            Catalog::Database(catalog) => {
                let usage = |error: InvalidParams| ClientError::Usage(error.to_string());
                let searched = |error: StoreError| match error {
                    StoreError::InvalidQuery(_) => ClientError::Usage(error.to_string()),
                    other => database_error(other),
                };
                if params.searches_entries() {
                    let search = params.into_kinds_request().map_err(usage)?;
                    let offsets = (
                        search
                            .resources
                            .as_ref()
                            .map_or(0, |request| request.offset),
                        search.entries.offset,
                    );
                    let resources = match &search.resources {
                        Some(request) => Some(catalog.search(request).map_err(searched)?),
                        None => None,
                    };
                    let entries = match search.entries.kinds.is_empty() {
                        true => Vec::new(),
                        false => catalog.search_entries(&search.entries).map_err(searched)?,
                    };
                    return Ok(crate::socket::kinds::merge_search_pages(
                        resources,
                        entries,
                        offsets,
                        search.limit,
                    ));
                }
                let request = params.into_request().map_err(usage)?;
                let page = catalog.search(&request).map_err(searched)?;
                let mut result = crate::socket::search_result(page.hits, page.next);
                result.note = page.note;
                Ok(result)
            }
        }
    }

    /// One page of the merged templates (`resources/templates/list`).
    pub fn templates_page(
        &mut self,
        params: &ListParams,
    ) -> Result<ListTemplatesResult, ClientError> {
        match self {
            Catalog::Daemon(client) => client.call::<ListTemplates>(params, Some(LIST_TIMEOUT)),
            Catalog::Database(catalog) => {
                let after = params
                    .after()
                    .map_err(|error| ClientError::Usage(error.to_string()))?;
                let (rows, more) = catalog
                    .list_templates(after.as_deref(), OFFLINE_PAGE_SIZE)
                    .map_err(database_error)?;
                typed(&crate::socket::templates_page(&rows, more)).map_err(database_error)
            }
        }
    }

    /// One page of one server's own snapshot (`catalog/list`); an unknown server is
    /// `NotFound` either way.
    pub fn server_page(
        &mut self,
        params: &ServerListParams,
    ) -> Result<ServerListResult, ClientError> {
        match self {
            Catalog::Daemon(client) => client.call::<CatalogList>(params, Some(LIST_TIMEOUT)),
            Catalog::Database(catalog) => {
                let (after, limit) = params
                    .checked()
                    .map_err(|error| ClientError::Usage(error.to_string()))?;
                if !catalog
                    .server_exists(&params.server)
                    .map_err(database_error)?
                {
                    return Err(no_such_server(&params.server));
                }
                let (rows, more) = catalog
                    .server_snapshot(&params.server, after.as_deref(), limit)
                    .map_err(database_error)?;
                crate::socket::server_list_result(params.server.clone(), rows, more)
                    .map_err(database_error)
            }
        }
    }

    /// `NotFound` (exit 4) unless a server named `server` is configured.
    pub fn require_server(&mut self, server: &str) -> Result<(), ClientError> {
        let probe = ServerListParams {
            server: server.to_string(),
            cursor: None,
            limit: Some(1),
        };
        self.server_page(&probe).map(|_| ())
    }

    /// Everything known about one URI (`catalog/resource`).
    pub fn resource(&mut self, uri: &str) -> Result<ResourceDetails, ClientError> {
        match self {
            Catalog::Daemon(client) => {
                client.call::<CatalogResource>(&UriParams { uri: uri.into() }, Some(QUERY_TIMEOUT))
            }
            Catalog::Database(catalog) => {
                let listings = catalog.listings(uri).map_err(database_error)?;
                crate::socket::resource_details(listings)
                    .map_err(database_error)?
                    .ok_or_else(|| ClientError::NotFound(format!("no mirrored server lists {uri}")))
            }
        }
    }
}

impl Catalog {
    /// One page of tools or prompts (`catalog/tools`, `catalog/prompts`) and the next cursor.
    pub fn entries_page(
        &mut self,
        kind: Kind,
        params: &EntriesParams,
    ) -> Result<(Vec<serde_json::Value>, Option<String>), ClientError> {
        match self {
            Catalog::Daemon(client) => match kind {
                Kind::Prompt => {
                    let page = client.call::<CatalogPrompts>(params, Some(LIST_TIMEOUT))?;
                    Ok((page.prompts, page.next_cursor))
                }
                _ => {
                    let page = client.call::<CatalogTools>(params, Some(LIST_TIMEOUT))?;
                    Ok((page.tools, page.next_cursor))
                }
            },
            Catalog::Database(catalog) => {
                let after = crate::socket::kinds::entries_after(params).map_err(answered)?;
                let after = after
                    .as_ref()
                    .map(|(server, name)| (server.as_str(), name.as_str()));
                let (rows, more) = catalog
                    .list_entries(kind, params.server.as_deref(), after, OFFLINE_PAGE_SIZE)
                    .map_err(database_error)?;
                Ok(crate::socket::kinds::entries_page_of(&rows, more))
            }
        }
    }

    /// One whole tool or prompt (`catalog/tool`, `catalog/prompt`).
    pub fn entry(&mut self, kind: Kind, params: &EntryParams) -> Result<EntryDetails, ClientError> {
        match self {
            Catalog::Daemon(client) => match kind {
                Kind::Prompt => client.call::<CatalogPrompt>(params, Some(QUERY_TIMEOUT)),
                _ => client.call::<CatalogTool>(params, Some(QUERY_TIMEOUT)),
            },
            Catalog::Database(catalog) => {
                let listing = catalog
                    .entry(kind, &params.server, &params.name)
                    .map_err(database_error)?;
                crate::socket::kinds::entry_details_of(kind, params, listing).map_err(answered)
            }
        }
    }
}

/// The error the daemon would have answered, as the CLI reports it.
fn answered(error: crate::protocol::ErrorObject) -> ClientError {
    ClientError::Remote {
        code: error.code,
        message: error.message,
        data: error.data,
    }
}

pub fn no_such_server(server: &str) -> ClientError {
    ClientError::NotFound(format!(
        "no server named {server}; `mcp-mirror status` lists the configured servers"
    ))
}

/// Which database to read when no daemon answers.
#[derive(Debug, Clone)]
pub enum DatabaseChoice {
    /// Given with `--database` (or its environment variable): always this one.
    Given(PathBuf),
    /// The socket was not chosen either: the one its daemon records, else the standard one.
    Default(PathBuf),
    /// The socket was chosen: only the database its daemon records beside it.
    OfSocket,
}

impl DatabaseChoice {
    fn resolve(&self, socket: &Path) -> Result<PathBuf, ClientError> {
        if let DatabaseChoice::Given(path) = self {
            return Ok(path.clone());
        }
        let record_path = socket_record_path(socket);
        let recorded = std::fs::read(&record_path)
            .ok()
            .and_then(|text| serde_json::from_slice::<SocketRecord>(&text).ok());
        match (recorded, self) {
            (Some(record), _) => Ok(record.database),
            (None, DatabaseChoice::Default(path)) => Ok(path.clone()),
            (None, _) => Err(ClientError::UnknownDatabase {
                socket: socket.to_path_buf(),
                record: record_path,
            }),
        }
    }
}

/// A page the daemon would write, read back as the client's typed result: offline answers
/// go through the same shaping as the daemon's.
fn typed<T: serde::de::DeserializeOwned>(
    served: &impl serde::Serialize,
) -> Result<T, serde_json::Error> {
    serde_json::from_value(serde_json::to_value(served)?)
}
