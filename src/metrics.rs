//! Prometheus metrics: the histograms observed where walks and swaps happen, and the text
//! exposition of everything else read from the same `catalog/status` answer the socket gives,
//! so the two never disagree.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::protocol::{IndexPhase as Phase, IndexStatus};
use crate::protocol::{ServerState, StatusResult};

/// Every metric name starts with this (`mcp_mirror_…`).
const PREFIX: &str = "mcp_mirror";
/// The content type of what `prometheus-client` encodes: the OpenMetrics text format, which
/// Prometheus scrapes natively.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;

/// The histograms live for the whole process; everything else is read at scrape time.
struct Histograms {
    /// Each server's walk durations, by name; a scrape drops those of servers no longer
    /// configured (a reload removed them) and shows only those of the servers its status lists.
    walk_duration: Mutex<BTreeMap<String, Histogram>>,
    swap_hold: Histogram,
    search_duration: Histogram,
}

fn duration_buckets() -> Histogram {
    // 1 ms .. about 33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn histograms() -> &'static Histograms {
    static HISTOGRAMS: OnceLock<Histograms> = OnceLock::new();
    HISTOGRAMS.get_or_init(|| Histograms {
        walk_duration: Mutex::new(BTreeMap::new()),
        swap_hold: duration_buckets(),
        // 0.25 ms .. about 4 s: most searches take milliseconds, the deadline is seconds.
        search_duration: Histogram::new(exponential_buckets(0.000_25, 2.0, 15)),
    })
}

/// A committed walk of `server` took `duration` (connect excluded, pages to commit).
pub fn observe_walk(server: &str, duration: Duration) {
    let mut walks = histograms()
        .walk_duration
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !walks.contains_key(server) {
        walks.insert(server.to_string(), duration_buckets());
    }
    if let Some(histogram) = walks.get(server) {
        histogram.observe(duration.as_secs_f64());
    }
}

/// Drops the walk-duration series of servers the whole status (every configured server) no
/// longer lists: every other per-server series is read from the status at each scrape, so a
/// reload that removes servers leaves none of theirs behind.
pub fn forget_removed_servers(status: &StatusResult) {
    let listed: BTreeSet<&str> = status
        .servers
        .iter()
        .map(|server| server.name.as_str())
        .collect();
    histograms()
        .walk_duration
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .retain(|server, _| listed.contains(server.as_str()));
}

/// The walk durations of the servers a scrape's status lists, each series labelled by its
/// server (the histograms are shared with the process-wide ones, not copied).
#[derive(Debug)]
struct WalkDurations(Vec<(Labels, Histogram)>);

impl WalkDurations {
    fn of(status: &StatusResult) -> WalkDurations {
        let walks = histograms()
            .walk_duration
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        WalkDurations(
            status
                .servers
                .iter()
                .filter_map(|server| {
                    let histogram = walks.get(&server.name)?;
                    Some((server_label(&server.name), histogram.clone()))
                })
                .collect(),
        )
    }
}

impl Collector for WalkDurations {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            "walk_duration",
            "Duration of committed walks, first page to commit",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (labels, histogram) in &self.0 {
            histogram.encode(metric.encode_family(labels)?)?;
        }
        Ok(())
    }
}

/// A swap held the database's write lock for `hold`.
pub fn observe_swap_hold(hold: Duration) {
    histograms().swap_hold.observe(hold.as_secs_f64());
}

/// A `catalog/search` was answered `duration` after it arrived (the gate's wait included).
pub fn observe_search(duration: Duration) {
    histograms().search_duration.observe(duration.as_secs_f64());
}

fn server_label(server: &str) -> Labels {
    vec![("server".to_string(), server.to_string())]
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

fn gauge_family() -> Family<Labels, Gauge> {
    Family::default()
}

fn counter_family() -> Family<Labels, Counter> {
    Family::default()
}

/// Every state the search index can be in, as `catalog/status` names it.
const INDEX_PHASES: [&str; 5] = ["opening", "ready", "catching-up", "rebuilding", "failed"];

/// The name `catalog/status` gives `phase` (its serde tag), one of [`INDEX_PHASES`].
fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Opening => "opening",
        Phase::Ready => "ready",
        Phase::CatchingUp => "catching-up",
        Phase::Rebuilding { .. } => "rebuilding",
        Phase::Failed => "failed",
    }
}

/// The search index's state, the generation it reflects, and its lag: how many change feed
/// sequence numbers the store is ahead of it (the store generation is the feed's newest
/// sequence number, the same `changeSeq` status shows), 0 when it has caught up.
fn register_search_index(registry: &mut Registry, index: &IndexStatus, change_seq: i64) {
    let state = gauge_family();
    let current = phase_name(index.phase);
    for candidate in INDEX_PHASES {
        state
            .get_or_create(&labels(&[("state", candidate)]))
            .set(i64::from(candidate == current));
    }
    registry.register(
        "search_index_state",
        "The search index's state (1 for the state it is in)",
        state,
    );
    // Before its first commit the index reflects nothing: the whole feed is ahead of it.
    let reflected = index.generation.unwrap_or(0);
    let generation: Gauge = Gauge::default();
    generation.set(reflected as i64);
    registry.register(
        "search_index_generation",
        "The store generation (change feed sequence number) the search index reflects",
        generation,
    );
    let lag: Gauge = Gauge::default();
    lag.set(change_seq.saturating_sub(reflected as i64).max(0));
    registry.register(
        "search_index_lag_generations",
        "How far the search index is behind the store, in change feed sequence numbers",
        lag,
    );
    let documents: Gauge = Gauge::default();
    documents.set(index.documents as i64);
    registry.register(
        "search_index_documents",
        "Entries in the search index",
        documents,
    );
    let pinned: Gauge = Gauge::default();
    pinned.set(i64::from(index.pinned_generation.is_some()));
    registry.register(
        "search_index_pinned",
        "1 while the search index applies a large change in batches and searches answer from its commit before it",
        pinned,
    );
}

/// The HTTP face's connection counts for `render`.
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpConnections {
    /// Connections open now.
    pub open: usize,
    /// The most connections one peer holds now, counted as `max_connections_per_peer`
    /// counts them (a share taken at accept, given back when the connection ends).
    pub largest_peer: usize,
}

/// The text exposition of `status` (what `catalog/status` answers now, restricted to the
/// scraper's view: nothing is said of a server it does not list), the HTTP face's
/// connections, and the histograms.
// Over 100 lines on purpose: the exposition is a flat list of metric families, each a few lines
// from `StatusResult`, in the order a scraper reads them.
pub fn render(status: &StatusResult, http: HttpConnections) -> String {
    let mut registry = Registry::with_prefix(PREFIX);
    let entries = gauge_family();
    let state = gauge_family();
    let stale = gauge_family();
    let walks = counter_family();
    let notifications = counter_family();
    let coalesced = counter_family();
    let restarted = counter_family();
    let connections = counter_family();
    let fallbacks = counter_family();
    for server in &status.servers {
        let name = server.name.as_str();
        entries
            .get_or_create(&labels(&[("server", name), ("kind", "resource")]))
            .set(server.resources as i64);
        entries
            .get_or_create(&labels(&[("server", name), ("kind", "template")]))
            .set(server.templates as i64);
        for &candidate in ServerState::ALL {
            state
                .get_or_create(&labels(&[("server", name), ("state", candidate.as_str())]))
                .set(i64::from(candidate == server.state));
        }
        stale
            .get_or_create(&server_label(name))
            .set(i64::from(server.stale));
        walks
            .get_or_create(&labels(&[("server", name), ("outcome", "ok")]))
            .inc_by(server.walks_ok);
        walks
            .get_or_create(&labels(&[("server", name), ("outcome", "failed")]))
            .inc_by(server.walks_failed);
        if let Some(live) = &server.live {
            notifications
                .get_or_create(&server_label(name))
                .inc_by(live.notifications);
            coalesced
                .get_or_create(&server_label(name))
                .inc_by(live.walks_coalesced);
            restarted
                .get_or_create(&server_label(name))
                .inc_by(live.walks_restarted);
            connections
                .get_or_create(&server_label(name))
                .inc_by(live.connections);
            for (reason, count) in &live.follow_fallbacks {
                fallbacks
                    .get_or_create(&labels(&[("server", name), ("reason", reason.as_str())]))
                    .inc_by(*count);
            }
        }
    }
    registry.register(
        "server_entries",
        "Entries in each server's snapshot, by kind",
        entries,
    );
    registry.register(
        "server_state",
        "Each server's state (1 for the state it is in)",
        state,
    );
    registry.register(
        "server_stale",
        "1 while a server's snapshot is stale (its last walk failed or it is unreachable)",
        stale,
    );
    registry.register("walks", "Walks finished, by outcome", walks);
    registry.register(
        "notifications",
        "list_changed notifications received from each server",
        notifications,
    );
    registry.register(
        "walks_coalesced",
        "Notifications that did not need a walk of their own",
        coalesced,
    );
    registry.register(
        "walks_restarted",
        "Walks abandoned and restarted because the list changed while they ran",
        restarted,
    );
    registry.register(
        "follow_fallbacks",
        "Full walks of a followed upstream mirror instead of following its feed, by reason",
        fallbacks,
    );
    registry.register(
        "session_connections",
        "Connections made to each server (reconnects included)",
        connections,
    );
    register_fleet(&mut registry, status);
    let clients = gauge_family();
    clients
        .get_or_create(&labels(&[("face", "socket")]))
        .set(status.daemon.clients as i64);
    clients
        .get_or_create(&labels(&[("face", "http")]))
        .set(http.open as i64);
    registry.register("clients", "Clients connected now, by face", clients);
    let largest_peer: Gauge = Gauge::default();
    largest_peer.set(http.largest_peer as i64);
    registry.register(
        "http_peer_connections_largest",
        "The most HTTP connections one peer (address or IPv6 /64) holds now: what [http] max_connections_per_peer bounds",
        largest_peer,
    );
    let resources: Gauge = Gauge::default();
    resources.set(status.daemon.resources as i64);
    registry.register(
        "resources",
        "Resources in all snapshots (before merging by URI)",
        resources,
    );
    let change_seq: Gauge = Gauge::default();
    change_seq.set(status.daemon.change_seq);
    registry.register(
        "change_feed_seq",
        "The change feed's latest sequence number",
        change_seq,
    );
    if let Some(index) = &status.daemon.search_index {
        register_search_index(&mut registry, index, status.daemon.change_seq);
    }
    let uptime: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
    uptime.set(status.daemon.uptime_ms as f64 / 1000.0);
    registry.register_with_unit(
        "uptime",
        "Time since the daemon started",
        Unit::Seconds,
        uptime,
    );
    let histograms = histograms();
    registry.register_collector(Box::new(WalkDurations::of(status)));
    registry.register_with_unit(
        "swap_hold",
        "How long a swap held the database's write lock",
        Unit::Seconds,
        histograms.swap_hold.clone(),
    );
    registry.register_with_unit(
        "search_duration",
        "Time from a catalog/search request to its answer, waiting for the search gate included",
        Unit::Seconds,
        histograms.search_duration.clone(),
    );
    let mut text = String::new();
    if let Err(error) = encode(&mut text, &registry) {
        tracing::warn!(%error, "cannot encode the metrics");
    }
    text
}

/// Servers followed through a fan-out engine (a NATS bucket): the engine and bucket as labels,
/// the revision applied, the lag in revisions and seconds, connections and whole-bucket loads.
fn register_fleet(registry: &mut Registry, status: &StatusResult) {
    let revision = gauge_family();
    let lag_revisions = gauge_family();
    let lag_seconds: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    let connections = counter_family();
    let reloads = counter_family();
    for server in &status.servers {
        let Some(fleet) = server.live.as_ref().and_then(|live| live.fleet.as_ref()) else {
            continue;
        };
        let followed = labels(&[
            ("server", server.name.as_str()),
            ("engine", fleet.engine.as_str()),
            ("bucket", fleet.bucket.as_str()),
        ]);
        revision.get_or_create(&followed).set(fleet.revision as i64);
        lag_revisions
            .get_or_create(&followed)
            .set(fleet.lag_revisions as i64);
        lag_seconds
            .get_or_create(&followed)
            .set(fleet.lag_ms as f64 / 1000.0);
        connections
            .get_or_create(&followed)
            .inc_by(fleet.connections);
        reloads.get_or_create(&followed).inc_by(fleet.reloads);
    }
    registry.register(
        "fleet_revision",
        "The bucket revision a followed server's snapshot reflects",
        revision,
    );
    registry.register(
        "fleet_lag_revisions",
        "Revisions of the bucket after the applied one, when the last batch was applied",
        lag_revisions,
    );
    registry.register(
        "fleet_lag_seconds",
        "From the last applied update's publication to its commit here",
        lag_seconds,
    );
    registry.register(
        "fleet_connections",
        "Connections made to the fan-out engine (reconnects included)",
        connections,
    );
    registry.register(
        "fleet_reloads",
        "Whole-bucket loads (the first sync, a purged history, a bucket made again)",
        reloads,
    );
}
