//! The actor's walks: a changed list debounced into a walk, walks paced by the last one's
//! duration, the outcome of a walk (its waiters answered, the next one scheduled), and polling
//! when the server cannot push.

use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use super::state_machine::answer;
use super::*;
use crate::protocol::Kind;
use crate::session::pacing::{with_poll_jitter, WalkCost};
use crate::session::state::{AskedBy, Link, Phase, State, Waiter, Walk};
use crate::session::Refreshed;
use crate::store::{now_ms, ServerUpdate};
use crate::upstream::PushChannel;
use crate::walk::{definitions, follow};
use crate::walk::{WalkError, WalkSummary};

/// Walks a stream of changes may abandon in a row before one is let finish.
const MAX_RESTARTS_IN_A_ROW: u32 = 3;

/// The quiet period before following an upstream mirror's feed (`debounce`, when shorter).
pub(super) const FOLLOW_DEBOUNCE: Duration = Duration::from_millis(10);
/// How soon a follower asks again whether its upstream mirror's servers have loaded (their
/// first load's commit also notifies it, which comes sooner).
const UPSTREAM_LOADING_RETRY: Duration = Duration::from_secs(2);

impl Actor {
    /// One kind's list changed: that kind alone is walked (with any other already pending).
    pub(super) fn on_kind_change(&mut self, mut link: Box<Link>, kind: Kind) -> State {
        if !link.kinds.contains(&kind) {
            return State::Connected(link);
        }
        if !link.pending.contains(&kind) {
            link.pending.push(kind);
        }
        self.debounce_walk(link)
    }

    /// The lists changed (or may have): every kind is walked.
    pub(super) fn on_change(&mut self, mut link: Box<Link>) -> State {
        link.pending = link.kinds.clone();
        self.debounce_walk(link)
    }

    /// Debounce, then walk the pending kinds; a walk under way starts over.
    pub(super) fn debounce_walk(&mut self, mut link: Box<Link>) -> State {
        if !link.mirrors {
            return State::Connected(link);
        }
        // A followed mirror announces a burst of its swaps once, and a follow fetches only
        // what its feed names, since the cursor: waiting long for quiet only delays the
        // change, and a follow under way is never thrown away (the next one replays from
        // where it ends).
        let followed = link.session.hello.follows_feed();
        let debounce = match followed {
            true => self.config.timings.debounce.min(FOLLOW_DEBOUNCE),
            false => self.config.timings.debounce,
        };
        let may_restart = !followed && link.restarts_in_a_row < MAX_RESTARTS_IN_A_ROW;
        match &mut link.phase {
            Phase::Idle { .. } => link.phase = Phase::debouncing(debounce),
            Phase::Debouncing { quiet_at, ceiling } => {
                *quiet_at = (Instant::now() + debounce).min(*ceiling);
            }
            // The walk held back takes this change along.
            Phase::Throttled { .. } => {}
            // After a few restarts in a row (a follow: at once) the walk runs to the end, and
            // the change that came meanwhile gets the walk after it: a server that changes
            // faster than it can be walked is still mirrored, a little behind, instead of never.
            Phase::Walking(walk) if !may_restart => walk.changed = true,
            // The walk may have read pages from before the change: start over.
            Phase::Walking(_) => {
                let abandoned = std::mem::replace(&mut link.phase, Phase::debouncing(debounce));
                if let Phase::Walking(walk) = abandoned {
                    for kind in walk.kinds {
                        if !link.pending.contains(&kind) {
                            link.pending.push(kind);
                        }
                    }
                    // An abandoned walk counts for the pace like one that ended (only a
                    // server that is not followed has its walks abandoned).
                    self.walk_pace
                        .record(walk.started, Instant::now(), WalkCost::Walk);
                    self.meter.end(false);
                    tracing::info!(
                        generation = walk.generation,
                        "the list changed during the walk; discarding it and walking again"
                    );
                    self.waiting.extend(walk.waiters);
                }
                link.restarts_in_a_row += 1;
                self.counters.walks_restarted += 1;
                self.show_counters(&link);
            }
        }
        State::Connected(link)
    }

    pub(super) async fn start_walk(&mut self, mut link: Box<Link>) -> State {
        // The state goes to the writer beside the walk's first request, not before it: the
        // writer may be busy (another server's swap), and its queue keeps the order anyway
        // (`join!` polls the report first, so it is queued before any page is staged).
        let walking = self.report(ServerUpdate::Walking);
        self.counters.walks_started += 1;
        let generation = self.counters.walks_started;
        self.show_counters(&link);
        self.publish(|live| {
            live.next_walk_at_ms = None;
            live.throttled_until_ms = None;
            live.throttle_reason = None;
        });
        let span = tracing::info_span!("walk", generation);
        let (session, store) = (link.session.clone(), self.store.clone());
        let (server, limits) = (self.config.name.clone(), self.config.limits);
        // The kinds whose lists changed, or every kind for a scheduled walk or a refresh. A
        // followed mirror's feed says itself which kinds changed: the follow reads it for all.
        let pending = std::mem::take(&mut link.pending);
        let followed = link.session.hello.follows_feed();
        let kinds: Vec<Kind> = match pending.is_empty() || followed {
            true => link.kinds.clone(),
            false => pending,
        };
        let walked = kinds.clone();
        self.meter.begin();
        let meter = self.meter.clone();
        let may_hold = self.upstream_loading_since.map_or(true, |since| {
            since.elapsed() < self.config.timings.upstream_load_wait
        });
        let run = async move {
            let walk = async {
                match followed {
                    true => {
                        follow::walk_or_follow(&session, &store, &server, limits, &walked, may_hold)
                            .await
                    }
                    false => {
                        definitions::walk_kinds(&session, &store, &server, limits, &walked).await
                    }
                }
            };
            tokio::join!(walking, meter.measure(walk)).1
        }
        .instrument(span)
        .boxed();
        link.phase = Phase::Walking(Walk {
            generation,
            kinds,
            started: Instant::now(),
            run,
            waiters: std::mem::take(&mut self.waiting),
            again: false,
            changed: false,
        });
        State::Connected(link)
    }

    /// A walk that a change asks for: now, or held back until the walk pace allows it. A
    /// server that says its list changed with every answer is walked no more often than
    /// `min_walk_interval` (or its own walk time, when longer) allows, and the change that
    /// waits is never lost: it gets the walk held back.
    pub(super) async fn walk_after_change(&mut self, link: Box<Link>) -> State {
        self.paced_walk(link, AskedBy::Change).await
    }

    /// A walk now, or held back until the walk pace allows it (see `walk_after_change`).
    pub(super) async fn paced_walk(&mut self, mut link: Box<Link>, asked_by: AskedBy) -> State {
        let min_walk_interval = self.config.timings.min_walk_interval;
        let Some(until) = self.walk_pace.held_until(min_walk_interval, Instant::now()) else {
            self.throttle_announced = false;
            if asked_by == AskedBy::Change {
                self.counters.notification_walks += 1;
            }
            return self.start_walk(link).await;
        };
        let spacing = self.walk_pace.spacing(min_walk_interval);
        let asked = match asked_by {
            AskedBy::Change => "list_changed arrives",
            AskedBy::Refresh => "refreshes arrive",
        };
        let reason = format!(
            "{asked} faster than this server may be walked: at most one walk per \
             {} ms (min_walk_interval, or the last walk's duration when longer; a follow: \
             the last follow's duration, at least {} ms)",
            spacing.as_millis(),
            super::super::pacing::FOLLOW_FLOOR.as_millis()
        );
        if !self.throttle_announced {
            self.throttle_announced = true;
            tracing::info!(
                spacing_ms = spacing.as_millis() as u64,
                "throttling walks: {reason}"
            );
        }
        self.counters.walks_throttled += 1;
        link.phase = Phase::Throttled { until };
        self.show_counters(&link);
        let at = now_ms() + until.saturating_duration_since(Instant::now()).as_millis() as i64;
        self.publish(|live| {
            live.throttled_until_ms = Some(at);
            live.throttle_reason = Some(reason);
            live.next_walk_at_ms = Some(at);
        });
        State::Connected(link)
    }

    // Over 100 lines: a walk's outcome taken in order over the one link it updates (its cost for
    // the pace, a failure, the fallback and the upstream's load noted, the change logged, a mirror
    // loop, the push stream, the next walk's delay); a candidate for named steps.
    pub(super) async fn on_walked(
        &mut self,
        mut link: Box<Link>,
        outcome: Result<WalkSummary, WalkError>,
    ) -> State {
        let Phase::Walking(walk) =
            std::mem::replace(&mut link.phase, Phase::Idle { next_walk: None })
        else {
            return State::Connected(link);
        };
        let Walk {
            generation,
            started,
            waiters,
            again,
            changed: changed_meanwhile,
            ..
        } = walk;
        let followed = link.session.hello.follows_feed();
        let cost = match (&outcome, followed) {
            (_, false) => WalkCost::Walk,
            (Ok(summary), true) if !summary.listed => WalkCost::Follow,
            (Ok(_), true) => WalkCost::FollowerWalk,
            (Err(_), true) => WalkCost::FollowerFailed,
        };
        self.walk_pace.record(started, Instant::now(), cost);
        self.meter.end(outcome.is_ok());
        link.restarts_in_a_row = 0;
        self.show_counters(&link);
        let summary = match outcome {
            Ok(summary) => summary,
            Err(WalkError::Connection(error)) => {
                // Its callers ride through the reconnect with the rest.
                self.waiting.extend(waiters);
                let server_asked = error.retry_after();
                let reason = format!("walk interrupted: {error}");
                return self.lose(link, reason, server_asked).await;
            }
            Err(error) => {
                let message = format!("walk failed: {error}");
                let delay = self.backoff.next_delay();
                tracing::warn!(generation, error = %message, retry_in_ms = delay.as_millis() as u64, "keeping the last snapshot");
                self.report(ServerUpdate::WalkFailed {
                    error: message.clone(),
                })
                .await;
                answer(waiters, Err(message.clone()));
                answer(std::mem::take(&mut self.waiting), Err(message));
                self.schedule_walk(&mut link, delay.min(self.config.resync_interval));
                return State::Connected(link);
            }
        };
        self.backoff.reset();
        if let Some(reason) = summary.fallback {
            self.publish(|live| *live.follow_fallbacks.entry(reason).or_default() += 1);
        }
        if !summary.upstream_loading.is_empty() {
            return self.hold_for_upstream(link, summary, waiters).await;
        }
        self.upstream_loading_since = None;
        crate::metrics::observe_walk(
            &self.config.name,
            std::time::Duration::from_millis(summary.report.duration_ms.max(0) as u64),
        );
        // `synced`, and counted, once every list is in and its duration observed: whoever sees
        // the state or `walksOk` move sees the walk's tools, prompts and metrics too. A follow
        // is a delta, not a walk: its one commit says `synced` itself.
        if cost != WalkCost::Follow {
            self.report(ServerUpdate::Synced { walked: true }).await;
        }
        let swap = summary.swap;
        let changed = summary.changed_anything();
        // A poll that found nothing new is routine: it stays out of the INFO log.
        if changed {
            tracing::info!(
                generation,
                pages = summary.report.pages,
                resources = swap.resources,
                added = swap.added,
                removed = swap.removed,
                changed = swap.changed,
                duration_ms = summary.report.duration_ms,
                "walk committed"
            );
        } else {
            tracing::debug!(
                generation,
                pages = summary.report.pages,
                resources = swap.resources,
                duration_ms = summary.report.duration_ms,
                "walk committed; nothing changed"
            );
        }
        link.poll.record(changed, summary.ttl_ms);
        let (ttl_ms, cache_scope) = (summary.ttl_ms, summary.most_private_scope());
        // A walk reads every entry: what it left out is the loop as it stands. A follow reads
        // only the changed ones: it names a loop it meets, and keeps the note it found otherwise.
        let mirror_loop = match (summary.looped, cost) {
            (0, WalkCost::Follow) => self.live.borrow().mirror_loop.clone(),
            (0, _) => None,
            (looped, _) => Some(format!(
                "a mirror loop: {looped} entries came through this mirror already and were left out"
            )),
        };
        if let Some(note) = &mirror_loop {
            if self.live.borrow().mirror_loop.is_none() {
                tracing::warn!("{note}");
            }
        }
        self.publish(|live| {
            live.ttl_ms = ttl_ms;
            live.cache_scope = cache_scope;
            live.mirror_loop = mirror_loop;
        });
        answer(waiters, Ok(Refreshed::walked(&summary)));
        if let Some(error) = &link.push.broken {
            // The walk is in, but changes cannot reach us until the stream is back.
            let error = error.clone();
            self.report(ServerUpdate::Reconnecting { error }).await;
        }
        // A refresh that arrived during the walk gets a walk of its own at once; a change
        // gets one as the walk pace allows.
        if changed_meanwhile && !again && self.waiting.is_empty() {
            return self.walk_after_change(link).await;
        }
        let delay = if again || !self.waiting.is_empty() {
            Duration::ZERO
        } else if link.push.polling || link.kind_cannot_push {
            self.poll_delay(&link)
        } else {
            self.config.resync_interval
        };
        self.schedule_walk(&mut link, delay);
        State::Connected(link)
    }

    /// The walk kept the snapshot: the upstream mirror has servers still loading. Asked again
    /// soon (their commit notifies sooner), until `upstream_load_wait` has passed.
    async fn hold_for_upstream(
        &mut self,
        mut link: Box<Link>,
        summary: WalkSummary,
        waiters: Vec<Waiter>,
    ) -> State {
        let wait = self.config.timings.upstream_load_wait;
        let since = *self.upstream_loading_since.get_or_insert_with(Instant::now);
        let left = wait.saturating_sub(since.elapsed());
        let reason = format!(
            "keeping the last snapshot: the upstream has not loaded {} yet (upstream_load_wait: \
             walked as it is after {} s)",
            summary.upstream_loading.join(", "),
            wait.as_secs()
        );
        self.report(ServerUpdate::Held {
            reason: reason.clone(),
        })
        .await;
        answer(waiters, Ok(Refreshed::walked(&summary)));
        self.schedule_walk(&mut link, left.min(UPSTREAM_LOADING_RETRY));
        State::Connected(link)
    }

    pub(super) fn schedule_walk(&self, link: &mut Link, delay: Duration) {
        link.phase = Phase::Idle {
            next_walk: Some(Instant::now() + delay),
        };
        let at = now_ms() + delay.as_millis() as i64;
        self.publish(|live| live.next_walk_at_ms = Some(at));
    }

    /// Brings the next walk of a server we now poll within one poll interval.
    pub(super) fn poll_soon(&mut self, mut link: Box<Link>) -> State {
        if let Phase::Idle {
            next_walk: Some(next_walk),
        } = link.phase
        {
            let delay = self.poll_delay(&link);
            if Instant::now() + delay < next_walk {
                self.schedule_walk(&mut link, delay);
            }
        }
        State::Connected(link)
    }

    /// The wait until the next poll, with jitter; the interval in force and why go to the live status.
    pub(super) fn poll_delay(&self, link: &Link) -> Duration {
        let plan = link.poll.plan(
            self.config.timings.poll_interval,
            self.config.resync_interval,
        );
        let delay = with_poll_jitter(plan.interval);
        self.publish(|live| {
            live.poll_interval_ms = Some(plan.interval.as_millis() as u64);
            live.poll_interval_reason = Some(plan.reason);
        });
        delay
    }

    pub(super) fn start_polling(&self, link: &mut Link, reason: String) {
        tracing::info!(%reason, "the server cannot push changes; polling");
        link.push.polling = true;
        // Polling replaces the stream that could not be reopened.
        link.push.broken = None;
        self.publish(|live| live.push = Some(PushChannel::Polling(reason)));
    }
}
