//! A fast peer for the walk benchmarks: a resource server on the official Rust MCP SDK (rmcp)
//! that generates each `resources/list` page on demand, so its cost per page is small and
//! constant whatever the catalog's size.
//!
//! `fast-peer --resources N --page-size P [--name NAME] [--era legacy|modern|both]
//! [--revision-file PATH]` serves
//! stdio; with `--http 127.0.0.1:0 [--nodelay]` it serves Streamable HTTP at `/mcp` and prints
//! `listening on http://ADDRESS/mcp` as its first line, the same contract as `mcp-fixture`,
//! so `bench/run` starts both the same way. Resources have the shape of the fixture's
//! generated ones (every optional field filled), under `fast://NAME/docs/NNNNNN.md`. With
//! `--revision-file`, every tenth resource's description ends with the file's text (read for
//! each page), so writing a new text there and refreshing changes a tenth of the catalog.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use axum::serve::ListenerExt as _;
use clap::{Parser, ValueEnum};
use rmcp::model::{
    Annotations, Icon, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    MetaObject, PaginatedRequestParams, ProtocolVersion, Resource, ResourceTemplate, Role,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};

/// Which protocol eras the peer speaks.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Era {
    /// Only the `initialize` handshake (up to 2025-11-25).
    Legacy,
    /// Only the stateless 2026-07-28 era.
    Modern,
    /// Every version the SDK knows.
    Both,
}

#[derive(Parser, Debug)]
#[command(about = "An rmcp resource server generating catalog pages on demand")]
struct Args {
    /// Number of resources in the catalog.
    #[arg(long, default_value_t = 100_000)]
    resources: usize,
    /// Resources per `resources/list` page.
    #[arg(long, default_value_t = 1000)]
    page_size: usize,
    /// Server name, in `serverInfo` and in every URI.
    #[arg(long, default_value = "fast")]
    name: String,
    /// Protocol eras to speak.
    #[arg(long, value_enum, default_value_t = Era::Both)]
    era: Era,
    /// Serve Streamable HTTP on this loopback address instead of stdio.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Set TCP_NODELAY on accepted HTTP connections (also when the environment has
    /// FAST_PEER_NODELAY=1, which is how `bench/run` is told). Off by default, like most
    /// servers in the field (axum's own default), so the benchmark measures clients against
    /// a server whose small writes Nagle's algorithm holds back.
    #[arg(long)]
    nodelay: bool,
    /// A file whose text (trimmed; none while the file is missing) every tenth resource's
    /// description ends with, read at each page.
    #[arg(long)]
    revision_file: Option<std::path::PathBuf>,
}

const MIME_TYPES: [&str; 4] = [
    "text/markdown",
    "text/plain",
    "application/json",
    "text/html",
];

/// The catalog: nothing is stored, every page is built from its offset.
#[derive(Clone)]
struct Catalog {
    settings: Arc<Settings>,
}

struct Settings {
    resources: usize,
    page_size: usize,
    name: String,
    versions: &'static [ProtocolVersion],
    icon: Icon,
    revision_file: Option<std::path::PathBuf>,
}

impl Catalog {
    fn resource(&self, index: usize, revision: &str) -> Resource {
        let settings = &self.settings;
        let topic = index % 37;
        let mut annotations = Annotations::default();
        annotations.audience = Some(vec![if index % 2 == 0 {
            Role::User
        } else {
            Role::Assistant
        }]);
        annotations.priority = Some((index % 10) as f32 / 10.0);
        annotations.last_modified = Some("2026-01-01T00:00:00Z".to_string());
        let mut meta = serde_json::Map::new();
        meta.insert("fast/index".to_string(), index.into());
        Resource::new(
            format!("fast://{}/docs/{index:06}.md", settings.name),
            format!("doc-{index:06}"),
        )
        .with_title(format!("Document {index}"))
        .with_description(match revision.is_empty() || index % 10 != 0 {
            true => format!("Synthetic document number {index} about topic-{topic}"),
            false => format!("Synthetic document number {index} about topic-{topic}, {revision}"),
        })
        .with_mime_type(MIME_TYPES[index % MIME_TYPES.len()])
        .with_size(1000 + index as u64)
        .with_icons(vec![settings.icon.clone()])
        .with_meta(MetaObject(meta))
        .with_annotations(annotations)
    }

    /// The page starting at `cursor` (a decimal offset; none is the first page).
    fn page(&self, cursor: Option<&str>) -> Result<ListResourcesResult, ErrorData> {
        let settings = &self.settings;
        let start = match cursor {
            None => 0,
            Some(text) => match text.parse::<usize>() {
                Ok(offset) if offset < settings.resources && offset % settings.page_size == 0 => {
                    offset
                }
                _ => return Err(ErrorData::invalid_params("invalid cursor", None)),
            },
        };
        let end = (start + settings.page_size).min(settings.resources);
        let revision = settings
            .revision_file
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default();
        let revision = revision.trim();
        let mut result = ListResourcesResult::with_all_items(
            (start..end).map(|i| self.resource(i, revision)).collect(),
        )
        .with_ttl_ms(0);
        if end < settings.resources {
            result.next_cursor = Some(end.to_string());
        }
        Ok(result)
    }
}

impl ServerHandler for Catalog {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_resources().build())
            .with_server_info(Implementation::new(
                self.settings.name.clone(),
                env!("CARGO_PKG_VERSION"),
            ))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(self.settings.versions)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.page(request.as_ref().and_then(|params| params.cursor.as_deref()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let template = ResourceTemplate::new(
            format!("fast://{}/docs/{{id}}.md", self.settings.name),
            "doc-by-id",
        )
        .with_title("Document by id")
        .with_description("Document by id in the synthetic catalog")
        .with_mime_type("text/markdown");
        Ok(ListResourceTemplatesResult::with_all_items(vec![template]).with_ttl_ms(0))
    }
}

fn versions(era: Era) -> &'static [ProtocolVersion] {
    match era {
        Era::Legacy => ProtocolVersion::known_up_to(&ProtocolVersion::LATEST_WITH_INITIALIZE),
        Era::Modern => {
            let all = ProtocolVersion::KNOWN_VERSIONS;
            let first_modern =
                ProtocolVersion::known_up_to(&ProtocolVersion::LATEST_WITH_INITIALIZE).len();
            &all[first_modern..]
        }
        Era::Both => ProtocolVersion::KNOWN_VERSIONS,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.page_size == 0 {
        bail!("--page-size must be at least 1");
    }
    let mut icon = Icon::new("https://example.invalid/icon.png");
    icon.mime_type = Some("image/png".to_string());
    icon.sizes = Some(vec!["16x16".to_string()]);
    let catalog = Catalog {
        settings: Arc::new(Settings {
            resources: args.resources,
            page_size: args.page_size,
            name: args.name,
            versions: versions(args.era),
            icon,
            revision_file: args.revision_file,
        }),
    };
    match args.http {
        None => {
            let running = catalog
                .serve(rmcp::transport::io::stdio_pipes())
                .await
                .context("while starting the stdio session")?;
            running.waiting().await.context("while serving stdio")?;
        }
        Some(address) => {
            if !address.ip().is_loopback() {
                bail!("--http must be a loopback address, not {address}");
            }
            let service = StreamableHttpService::new(
                move || Ok(catalog.clone()),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let router = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("while binding {address}"))?;
            let bound = listener.local_addr()?;
            let nodelay =
                args.nodelay || std::env::var_os("FAST_PEER_NODELAY").is_some_and(|v| v == "1");
            let listener = listener.tap_io(move |stream| {
                if nodelay {
                    let _ = stream.set_nodelay(true);
                }
            });
            println!("listening on http://{bound}/mcp");
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await
                .context("while serving HTTP")?;
        }
    }
    Ok(())
}
