//! A session whose server is a NATS JetStream bucket (`[servers.NAME] nats, bucket`): connect,
//! open the bucket, resume or reload (`nats::follow`), then apply each batch of updates as it
//! comes, answering the session's commands meanwhile. Any failure is this server's status line
//! (the snapshot stays, marked stale) and a retry after a growing wait; the daemon runs on.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use super::{LiveStatus, ReadError, Refreshed, SessionCommand};
use crate::config::ServerConfig;
use crate::nats::follow::{feed_mark, FollowError, FollowProgress, Follower};
use crate::nats::round::Round;
use crate::nats::FEED_KEY;
use crate::protocol::FleetStatus;
use crate::store::{now_ms, ServerUpdate, Store};
use crate::upstream::Backoff;

/// The longest wait between two attempts to follow a bucket again.
const RETRY_CEILING: Duration = Duration::from_secs(30);

pub(super) struct BucketSource {
    pub url: String,
    pub bucket: String,
    pub credentials: Option<PathBuf>,
}

/// How long after the last update a round is applied without the publisher's closing mark (a
/// publisher that stopped mid-round). A round (a swap's puts and deletes, then the mark) is
/// applied as one delta at its mark: applied as each update came, one change of one resource
/// at the origin (a put, a delete and the mark) was three deltas here, three writer
/// transactions and three index commits, about 20 ms of CPU per change in each downstream;
/// applied 1,000 updates at a time, a client here saw parts of one swap at the upstream.
const UNMARKED_ROUND_WAIT: Duration = Duration::from_secs(1);
/// How long after its first update a round is applied without the mark however its updates
/// keep coming (a publisher that never marks); a round past `MAX_ROUND_KEYS` or
/// `MAX_ROUND_BYTES` is applied at once.
const UNMARKED_ROUND_MAX: Duration = Duration::from_secs(30);
/// How often a follower waiting for a bucket's first whole publish looks again.
const MARK_POLL: Duration = Duration::from_millis(250);
/// The status line of a follower waiting for that.
const FIRST_PUBLISH_PENDING: &str =
    "the bucket has no publisher's mark yet: its first whole publish is under way";

struct Run<'a> {
    config: &'a ServerConfig,
    source: &'a BucketSource,
    store: &'a Store,
    live: &'a watch::Sender<LiveStatus>,
    connections: Arc<AtomicU64>,
    progress: FollowProgress,
}

impl Run<'_> {
    fn publish(&self, error: Option<String>) {
        let status = FleetStatus {
            engine: "nats".into(),
            bucket: self.source.bucket.clone(),
            revision: self.progress.revision,
            lag_revisions: self.progress.lag_revisions,
            lag_ms: self.progress.lag_ms,
            connections: self.connections.load(Ordering::Relaxed),
            reloads: self.progress.reloads,
            deltas: self.progress.deltas,
            error,
        };
        self.live.send_modify(|live| live.fleet = Some(status));
    }
}

pub(super) async fn run(
    config: ServerConfig,
    source: BucketSource,
    store: Store,
    mut stopping: watch::Receiver<bool>,
    mut commands: mpsc::Receiver<SessionCommand>,
    live: watch::Sender<LiveStatus>,
) {
    let mut run = Run {
        config: &config,
        source: &source,
        store: &store,
        live: &live,
        connections: Arc::new(AtomicU64::new(0)),
        progress: FollowProgress::default(),
    };
    let mut backoff = Backoff::new(Duration::from_secs(1), RETRY_CEILING);
    run.publish(None);
    loop {
        let _ = store
            .update_server(&config.name, ServerUpdate::Connecting)
            .await;
        let outcome = tokio::select! {
            _ = stopping.wait_for(|stop| *stop) => return,
            outcome = follow(&mut run, &mut commands, &mut backoff) => outcome,
        };
        let error = match outcome {
            Ok(()) => "the bucket's watch ended".to_string(),
            Err(error) => error.to_string(),
        };
        let delay = backoff.next_delay();
        tracing::warn!(server = %config.name, %error, "following the bucket failed; trying again in {delay:?}");
        let retry_at_ms = now_ms() + delay.as_millis() as i64;
        let _ = store
            .update_server(
                &config.name,
                ServerUpdate::BackingOff {
                    error: error.clone(),
                    retry_at_ms,
                },
            )
            .await;
        run.publish(Some(error));
        let wait = tokio::time::sleep(delay);
        tokio::pin!(wait);
        loop {
            tokio::select! {
                _ = stopping.wait_for(|stop| *stop) => return,
                () = &mut wait => break,
                Some(command) = commands.recv() => answer(&config, command),
            }
        }
    }
}

/// Connects, resumes or reloads, then applies updates until something fails.
async fn follow(
    run: &mut Run<'_>,
    commands: &mut mpsc::Receiver<SessionCommand>,
    backoff: &mut Backoff,
) -> Result<(), FollowError> {
    let client = crate::nats::connect(
        &run.source.url,
        run.source.credentials.as_deref(),
        run.connections.clone(),
    )
    .await?;
    let kv = crate::nats::open_bucket(&client, &run.source.bucket).await?;
    // A bucket without the publisher's mark is in its first publish: loading it now would
    // adopt part of the view. The snapshot stays as it is, and the status says why.
    let mut said = false;
    while feed_mark(&kv).await?.is_none() {
        if !said {
            said = true;
            tracing::info!(server = %run.config.name, bucket = %run.source.bucket, "waiting for the publisher's first whole publish of the bucket");
            run.publish(Some(FIRST_PUBLISH_PENDING.into()));
        }
        tokio::select! {
            () = tokio::time::sleep(MARK_POLL) => {}
            Some(command) = commands.recv() => answer(run.config, command),
        }
    }
    let mut follower = Follower::start(
        run.store,
        &run.config.name,
        &run.source.bucket,
        kv,
        run.config.limits,
        run.progress,
    )
    .await?;
    run.progress = follower.progress;
    run.publish(None);
    backoff.reset();
    let mut watch = follower.watch().await?;
    let mut round = Round::default();
    // When the round must be applied without its mark: a second after its last update, at
    // most `UNMARKED_ROUND_MAX` after its first, so a client's reads of this server (commands
    // here) move nothing.
    let mut first_at = tokio::time::Instant::now();
    let mut apply_by = first_at;
    // Whether the log said that the round under way is applied in parts (once a round).
    let mut split = false;
    loop {
        let waiting = !round.is_empty();
        let apply = tokio::select! {
            Some(command) = commands.recv() => {
                answer(run.config, command);
                false
            }
            entry = watch.next() => {
                let entry = match entry {
                    Some(entry) => entry.map_err(|error| FollowError::Watch(error.to_string()))?,
                    None => return Ok(()),
                };
                // The publisher's mark ends each round of its puts: a round is one delta here.
                let round_ends = entry.key == FEED_KEY && entry.delta == 0;
                let now = tokio::time::Instant::now();
                if round.is_empty() {
                    first_at = now;
                }
                apply_by = (now + UNMARKED_ROUND_WAIT).min(first_at + UNMARKED_ROUND_MAX);
                let full = follower.take(&mut round, entry).await?;
                if full && !round_ends && !split {
                    tracing::info!(server = %run.config.name, "a round of the bucket's updates past MAX_ROUND_KEYS or MAX_ROUND_BYTES is applied in parts");
                }
                split = (split || full) && !round_ends;
                round_ends || full
            }
            () = tokio::time::sleep_until(apply_by), if waiting => true,
        };
        if apply {
            follower.apply(std::mem::take(&mut round)).await?;
            run.progress = follower.progress;
            run.publish(None);
        }
    }
}

/// A refresh has nothing to walk (updates come as they are published); a read has no server
/// to go to.
fn answer(config: &ServerConfig, command: SessionCommand) {
    match command {
        SessionCommand::Refresh { reply } => {
            if let Some(reply) = reply {
                let _ = reply.send(Ok(Refreshed::followed()));
            }
        }
        SessionCommand::Read { reply, .. } => {
            let _ = reply.send(Err(ReadError::Offline {
                server: config.name.clone(),
                reason: "it is followed through a NATS bucket, which holds no contents".into(),
            }));
        }
    }
}
