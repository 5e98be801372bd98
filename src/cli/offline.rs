//! Where catalog reads come from: the daemon, or the database file read-only when no daemon
//! runs. Offline, each read calls the same answer function (`crate::answer`) the daemon calls,
//! on a `Reader` of the file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::client::Client;
use super::ClientError;
use crate::answer::{self, View};
use crate::protocol::{
    socket_record_path, CatalogChanges, CatalogDiff, CatalogHistory, CatalogList, CatalogPrompt,
    CatalogPrompts, CatalogResource, CatalogSearch, CatalogTool, CatalogTools, ChangesParams,
    ChangesResult, DiffParams, DiffResult, EntriesParams, EntryDetails, EntryParams, ErrorObject,
    HistoryParams, HistoryResult, Kind, ListParams, ListResources, ListResourcesResult,
    ListTemplates, ListTemplatesResult, ResourceDetails, SearchParams, SearchResult,
    ServerListParams, ServerListResult, SocketRecord, UriParams, INTERNAL_ERROR, INVALID_PARAMS,
    RESOURCE_NOT_FOUND,
};
use crate::store::Reader;

/// Rows per page when listing straight from the database.
const OFFLINE_PAGE_SIZE: usize = 1000;
/// How long the daemon may take to answer a page of a list, an accept or a page of drift.
pub(super) const LIST_TIMEOUT: Duration = Duration::from_secs(60);
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

pub enum Catalog {
    Daemon(Client),
    Database(Reader),
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
        match Reader::open_file(database) {
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
            Catalog::Database(reader) => {
                answer::list::resources(reader, params, OFFLINE_PAGE_SIZE, &View::owner())
                    .and_then(|page| page.typed_resources())
                    .map_err(offline)
            }
        }
    }

    /// `catalog/search`, with the daemon's defaults and caps either way.
    pub fn search(&mut self, params: SearchParams) -> Result<SearchResult, ClientError> {
        match self {
            Catalog::Daemon(client) => client.call::<CatalogSearch>(&params, Some(QUERY_TIMEOUT)),
            Catalog::Database(reader) => {
                answer::search::sqlite_search(reader, params).map_err(offline)
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
            Catalog::Database(reader) => {
                answer::list::templates(reader, params, OFFLINE_PAGE_SIZE, &View::owner())
                    .and_then(|page| page.typed_templates())
                    .map_err(offline)
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
            Catalog::Database(reader) => answer::list::server_list(reader, params, &View::owner())
                .map_err(|error| {
                    let unknown = error
                        .data
                        .as_ref()
                        .is_some_and(|data| data.not_found.as_deref() == Some("server"));
                    match unknown {
                        true => no_such_server(&params.server),
                        false => offline(error),
                    }
                }),
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
            Catalog::Database(reader) => answer::resource::details(reader, uri, &View::owner())
                .map_err(|error| match error.code {
                    RESOURCE_NOT_FOUND => {
                        ClientError::NotFound(format!("no mirrored server lists {uri}"))
                    }
                    _ => offline(error),
                }),
        }
    }

    /// One page of tools or prompts (`catalog/tools`, `catalog/prompts`) and the next cursor.
    pub fn entries_page(
        &mut self,
        kind: Kind,
        params: &EntriesParams,
    ) -> Result<(Vec<crate::protocol::Definition>, Option<String>), ClientError> {
        match self {
            Catalog::Daemon(client) => match kind {
                Kind::Prompt => {
                    let page = client.call::<CatalogPrompts>(params, Some(LIST_TIMEOUT))?;
                    Ok((page.prompts, page.next_cursor))
                }
                Kind::Tool => {
                    let page = client.call::<CatalogTools>(params, Some(LIST_TIMEOUT))?;
                    Ok((page.tools, page.next_cursor))
                }
                Kind::Resource | Kind::Template => Err(not_an_entry_kind(kind)),
            },
            Catalog::Database(reader) => {
                answer::entries::page(reader, kind, params, OFFLINE_PAGE_SIZE, &View::owner())
                    .map_err(offline)
            }
        }
    }

    /// One whole tool or prompt (`catalog/tool`, `catalog/prompt`).
    pub fn entry(&mut self, kind: Kind, params: &EntryParams) -> Result<EntryDetails, ClientError> {
        match self {
            Catalog::Daemon(client) => match kind {
                Kind::Prompt => client.call::<CatalogPrompt>(params, Some(QUERY_TIMEOUT)),
                Kind::Tool => client.call::<CatalogTool>(params, Some(QUERY_TIMEOUT)),
                Kind::Resource | Kind::Template => Err(not_an_entry_kind(kind)),
            },
            Catalog::Database(reader) => {
                answer::entries::details(reader, kind, params, &View::owner()).map_err(offline)
            }
        }
    }
}

impl Catalog {
    /// A page of the change feed (`catalog/changes`).
    pub fn changes(&mut self, params: &ChangesParams) -> Result<ChangesResult, ClientError> {
        match self {
            Catalog::Daemon(client) => client.call::<CatalogChanges>(params, Some(QUERY_TIMEOUT)),
            Catalog::Database(reader) => {
                answer::changes::changes(reader, params, &View::owner()).map_err(offline)
            }
        }
    }

    /// A page of one entry's kept versions (`catalog/history`).
    pub fn history(&mut self, params: &HistoryParams) -> Result<HistoryResult, ClientError> {
        match self {
            Catalog::Daemon(client) => client.call::<CatalogHistory>(params, Some(QUERY_TIMEOUT)),
            Catalog::Database(reader) => {
                answer::history::history(reader, params, &View::owner()).map_err(offline)
            }
        }
    }

    /// Two versions of one entry compared (`catalog/diff`).
    pub fn diff(&mut self, params: &DiffParams) -> Result<DiffResult, ClientError> {
        match self {
            Catalog::Daemon(client) => client.call::<CatalogDiff>(params, Some(QUERY_TIMEOUT)),
            Catalog::Database(reader) => {
                answer::history::diff(reader, params, &View::owner()).map_err(offline)
            }
        }
    }
}

/// An answer's error as the CLI reports it when it read the database itself: params that do
/// not fit are a usage error, our own failure a protocol error, anything else (a tool or
/// prompt no server lists) as the daemon would have answered it.
fn offline(error: ErrorObject) -> ClientError {
    match error.code {
        INVALID_PARAMS => ClientError::Usage(error.message),
        INTERNAL_ERROR => ClientError::Protocol(error.message),
        _ => ClientError::Remote {
            code: error.code,
            message: error.message,
            data: error.data,
        },
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

/// A tool or prompt method asked for another kind: the caller's mistake, named.
fn not_an_entry_kind(kind: Kind) -> ClientError {
    ClientError::Usage(format!("a {} is not a tool or a prompt", kind.as_str()))
}
