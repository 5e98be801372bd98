//! The search gate: at most `max_concurrent` searches run at once, a bounded queue waits for a
//! slot in fair order across clients, and every admitted search carries the deadline it must
//! finish by.
//!
//! Any search engine (SQLite FTS5 in the store, a derived index) takes a permit here before it
//! runs and gives the permit's deadline to its own cancellation (SQLite's progress handler,
//! an index's time budget). Cheap methods (`ping`, `status`, reads of one entry) never take
//! it, so they never queue behind searches.
//!
//! Fairness: a socket connection asks one thing at a time, so a per-connection cap is already
//! one; what a first-come queue lacks is a share. Four connections looping searches that run
//! into `search_timeout` held every slot and every place ahead in the queue, and a client's
//! plain search waited behind them. So the gate remembers, for each client (`SearchClient`,
//! one per connection), how much slot time it used lately (decaying with `USAGE_HALF_LIFE`)
//! and how much CPU its searches cost (a moving average; `SearchWork`): a free slot goes to the
//! waiter whose client used the least, and clients whose searches cost more than `HEAVY_SEARCH`
//! (or half the `search_timeout`) on average (the soak's abusers ran into it) together hold at most `max_concurrent - 1`
//! slots, so one slot is always left for everyone else. A busy client of quick searches is not
//! heavy: many searches are not what holds slots. A client that has finished no search yet (a
//! fresh connection) has no average to judge, and sixteen fresh connections each sending one
//! raw search took both slots and the whole queue from a client looping quick searches; so a
//! new client counts with the heavy ones (`SearchClient::is_limited`) until its first search
//! ends: the smallest share, never the slot left for established clients. The limited clients'
//! waiters also leave `max_concurrent` places of the queue to the others. One client may have at most `max_concurrent`
//! searches waiting; past that its own searches are refused "busy", so a client asking many at
//! once (the HTTP face's, one per identity) cannot fill the queue before others. The client of
//! a search comes from the task-local `CURRENT_CLIENT` that `socket::answer_request` sets around
//! each request, so every engine's call of `acquire` stays as it was; a search outside that
//! scope is a client of its own.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

// Nothing panics while holding the gate's locks; a poisoned one still holds consistent counts.
use super::error::lock;
use crate::config::SearchLimits;

/// How many searches may wait for a slot for every one allowed to run.
const QUEUED_PER_SLOT: usize = 4;
/// Searches longer than this on average (or than half the `search_timeout`, if shorter) make
/// a client heavy. The index answers in milliseconds; a client whose searches take a quarter
/// of a second holds slots a hundred times longer than the rest. With half the timeout alone
/// (1 s), the soak's raw FTS5 queries (about 1 s each under load) were not heavy, and the
/// well-behaved client waited up to 1.7 s for a slot.
const HEAVY_SEARCH: Duration = Duration::from_millis(250);
/// Searches this cheap or cheaper on average make a client quick: its next search of the index
/// may run on the answering thread that took its request (`SearchPermit::is_quick`), sparing
/// the hand-off to a blocking thread and back, a fifth of the daemon's time with 8 clients of
/// selective searches (each costs 0.1-0.2 ms of CPU).
const QUICK_SEARCH: Duration = Duration::from_millis(1);
/// How much a client's newest search weighs in its average duration. An eighth judges a client
/// by about its last eight searches: a client that searches in milliseconds stays light through
/// one slow search (a common word while the index was behind took the soak's well-behaved
/// client 1-1.6 s; weighing half, that one search made it heavy, and its next searches waited
/// past the timeout behind the raw searchers), and a client whose searches are slow is heavy
/// from its first.
const NEW_SEARCH_WEIGHT: f64 = 1.0 / 8.0;
/// A client's recent search time halves over this long.
const USAGE_HALF_LIFE: Duration = Duration::from_secs(10);

tokio::task_local! {
    /// The client on whose behalf the current task searches.
    pub static CURRENT_CLIENT: SearchClient;
}

/// Why a search was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("busy: {running} searches are running and {waiting} are waiting (max_concurrent_searches = {max_concurrent}); try again shortly")]
    Busy {
        running: usize,
        waiting: usize,
        max_concurrent: usize,
    },
    #[error("busy: no search slot came free within {0:?} (search_timeout); try again shortly")]
    WaitedTooLong(Duration),
}

/// What the gate has seen, for `catalog/status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateActivity {
    pub running: usize,
    pub waiting: usize,
    pub max_concurrent: usize,
    /// The most searches that ever ran at once.
    pub peak_running: usize,
    pub refused_busy: u64,
    pub timed_out: u64,
    /// Searches answered on the thread that took their request (`SearchPermit::is_quick`).
    pub in_place: u64,
}

/// One client of the gate (a socket connection; on the HTTP face a request or a session): the
/// search time it used lately. Cheap to clone; a new one has used nothing.
#[derive(Clone)]
pub struct SearchClient(Arc<Mutex<Usage>>);

impl Default for SearchClient {
    fn default() -> Self {
        static NEXT_NUMBER: AtomicU64 = AtomicU64::new(1);
        SearchClient(Arc::new(Mutex::new(Usage {
            number: NEXT_NUMBER.fetch_add(1, Ordering::Relaxed),
            ..Usage::default()
        })))
    }
}

#[derive(Default)]
struct Usage {
    /// Names the client in the log (`client 12`), so the searches a refused one waited
    /// behind can be told apart.
    number: u64,
    /// Decayed seconds of search time as of `at`.
    seconds: f64,
    at: Option<Instant>,
    /// A moving average of its searches' durations, in seconds (each new one weighs
    /// `NEW_SEARCH_WEIGHT`).
    average_search: Option<f64>,
}

impl Usage {
    fn decayed(&self, now: Instant) -> f64 {
        match self.at {
            Some(at) => {
                let halvings =
                    now.saturating_duration_since(at).as_secs_f64() / USAGE_HALF_LIFE.as_secs_f64();
                self.seconds * 0.5f64.powf(halvings)
            }
            None => 0.0,
        }
    }
}

impl std::fmt::Display for SearchClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "client {}", lock(&self.0).number)
    }
}

impl SearchClient {
    fn recent_seconds(&self, now: Instant) -> f64 {
        lock(&self.0).decayed(now)
    }

    /// Whether this client shares the heavy clients' slots: its searches take longer than
    /// `threshold` on average, or it has finished none yet, so nothing says they are quick.
    fn is_limited(&self, threshold: f64) -> bool {
        lock(&self.0)
            .average_search
            .map_or(true, |average| average > threshold)
    }

    /// Counts one search: it held a slot for `held`, and its work cost `cost` (the CPU time
    /// of the thread that ran it, where measured: `SearchWork::measure`).
    fn add(&self, held: Duration, cost: Duration) {
        let now = Instant::now();
        let cost = cost.as_secs_f64();
        let mut usage = lock(&self.0);
        usage.seconds = usage.decayed(now) + held.as_secs_f64();
        usage.at = Some(now);
        usage.average_search = Some(match usage.average_search {
            Some(average) => average + (cost - average) * NEW_SEARCH_WEIGHT,
            None => cost,
        });
    }

    /// Whether both are the same client (clones of one).
    fn is(&self, other: &SearchClient) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The client of the current task, or a new one outside any request's scope.
    fn current() -> SearchClient {
        CURRENT_CLIENT
            .try_with(SearchClient::clone)
            .unwrap_or_default()
    }
}

/// Shared by every connection; cheap to clone.
#[derive(Clone)]
pub struct SearchGate {
    limits: SearchLimits,
    shared: Arc<Shared>,
}

struct Shared {
    max_concurrent: usize,
    /// Searches longer than this on average make a client heavy, in seconds.
    heavy_search: f64,
    queue: Mutex<Queue>,
    peak_running: AtomicUsize,
    refused_busy: AtomicU64,
    timed_out: AtomicU64,
    in_place: AtomicU64,
}

#[derive(Default)]
struct Queue {
    running: usize,
    heavy_running: usize,
    /// The searches holding slots, oldest first: what a refused search waited behind.
    holders: Vec<Holder>,
    waiters: VecDeque<Waiter>,
    next_ticket: u64,
}

/// A search holding a slot.
struct Holder {
    ticket: u64,
    client: SearchClient,
    heavy: bool,
    since: Instant,
}

impl Queue {
    fn take_slot(&mut self, ticket: u64, client: &SearchClient, heavy: bool) {
        self.running += 1;
        self.heavy_running += usize::from(heavy);
        self.holders.push(Holder {
            ticket,
            client: client.clone(),
            heavy,
            since: Instant::now(),
        });
    }

    fn give_back(&mut self, ticket: u64, heavy: bool) {
        self.running -= 1;
        self.heavy_running -= usize::from(heavy);
        self.holders.retain(|holder| holder.ticket != ticket);
    }

    /// The searches holding slots, for the log: `client 7 (heavy, 1.93 s), client 3 (0.41 s)`.
    fn holders_text(&self, now: Instant) -> String {
        let holders: Vec<String> = self
            .holders
            .iter()
            .map(|holder| {
                let held = now.saturating_duration_since(holder.since).as_secs_f64();
                let heavy = if holder.heavy { "heavy, " } else { "" };
                format!("{} ({heavy}{held:.2} s)", holder.client)
            })
            .collect();
        holders.join(", ")
    }
}

struct Waiter {
    ticket: u64,
    client: SearchClient,
    /// Heavy or new (`SearchClient::is_limited`).
    heavy: bool,
    grant: oneshot::Sender<Slot>,
}
impl Shared {
    /// Whether a search of this weight may take a free slot now.
    fn may_run(&self, queue: &Queue, heavy: bool) -> bool {
        queue.running < self.max_concurrent
            && (!heavy || self.max_concurrent == 1 || queue.heavy_running + 1 < self.max_concurrent)
    }

    /// Hands free slots to waiters: the least recent usage first, then the oldest.
    fn dispatch(self: &Arc<Shared>, queue: &mut Queue) {
        let now = Instant::now();
        loop {
            let chosen = queue
                .waiters
                .iter()
                .enumerate()
                .filter(|(_, waiter)| self.may_run(queue, waiter.heavy))
                .min_by(|(_, a), (_, b)| {
                    a.client
                        .recent_seconds(now)
                        .total_cmp(&b.client.recent_seconds(now))
                        .then(a.ticket.cmp(&b.ticket))
                })
                .map(|(position, _)| position);
            let Some(waiter) = chosen.and_then(|position| queue.waiters.remove(position)) else {
                return;
            };
            queue.take_slot(waiter.ticket, &waiter.client, waiter.heavy);
            self.peak_running.fetch_max(queue.running, Ordering::AcqRel);
            let slot = Slot {
                shared: Some(self.clone()),
                ticket: waiter.ticket,
                heavy: waiter.heavy,
            };
            // A waiter that gave up before its grant: take the slot back and try the next.
            if let Err(mut slot) = waiter.grant.send(slot) {
                slot.shared = None;
                queue.give_back(waiter.ticket, waiter.heavy);
            }
        }
    }
}

/// A running search's place; given back (and the next waiter admitted) when dropped, also when
/// it is dropped unreceived inside a grant whose waiter went away.
struct Slot {
    shared: Option<Arc<Shared>>,
    ticket: u64,
    heavy: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            let mut queue = lock(&shared.queue);
            queue.give_back(self.ticket, self.heavy);
            shared.dispatch(&mut queue);
        }
    }
}

/// Leave to run one search until `deadline`; the slot is free again when this drops.
pub struct SearchPermit {
    pub deadline: Instant,
    started: Instant,
    work: SearchWork,
    client: SearchClient,
    shared: Arc<Shared>,
    slot: Slot,
}

impl Drop for SearchPermit {
    fn drop(&mut self) {
        // Counted before the slot is given back, so the next choice sees it. A search whose
        // work was not measured costs the time it held the slot.
        let held = self.started.elapsed();
        let cost = self.work.cpu().unwrap_or(held);
        self.client.add(held, cost);
    }
}

/// The CPU time a search's work took, summed over the threads that ran it
/// (`SearchWork::measure`); cheap to clone into the closure that runs the search.
///
/// A client is heavy by what its searches cost, not by how long they took: on a loaded host
/// (the soak at load 12 on 2 cores) a plain search that costs 5 ms of CPU took up to 1 s, the
/// well-behaved client's average by time passed `HEAVY_SEARCH`, and it waited with the raw
/// searchers for the heavy clients' slot (3 of 2,547 refused busy). Its CPU time stayed small;
/// a raw FTS5 query's or a common word's over a million rows does not.
#[derive(Clone, Default)]
pub struct SearchWork(Arc<Mutex<Option<Duration>>>);

impl SearchWork {
    /// Runs `work` on this thread and adds the CPU time it took.
    pub fn measure<T>(&self, work: impl FnOnce() -> T) -> T {
        let before = thread_cpu_time();
        let outcome = work();
        let used = thread_cpu_time().saturating_sub(before);
        let mut cpu = lock(&self.0);
        *cpu = Some(cpu.unwrap_or_default() + used);
        outcome
    }

    /// Adds `cost` as if measured: the time a search held a thread it had to give up (an
    /// answering thread, past `QUICK_BUDGET`), so a client whose searches keep doing so (on a
    /// loaded host, say) stops being quick instead of wasting a budget on every search.
    pub fn charge(&self, cost: Duration) {
        let mut cpu = lock(&self.0);
        *cpu = Some(cpu.unwrap_or_default() + cost);
    }

    fn cpu(&self) -> Option<Duration> {
        *lock(&self.0)
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    if status != 0 {
        return Duration::ZERO;
    }
    Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
}

impl SearchPermit {
    /// Where the search's work is measured (`SearchWork::measure`), to be moved into the
    /// closure that runs it.
    pub fn work(&self) -> SearchWork {
        self.work.clone()
    }

    /// Whether the search may run on the answering thread: its client is established, neither
    /// heavy nor raw, and its searches cost at most `QUICK_SEARCH` of CPU on average.
    pub fn is_quick(&self) -> bool {
        !self.slot.heavy
            && lock(&self.client.0)
                .average_search
                .is_some_and(|average| average <= QUICK_SEARCH.as_secs_f64())
    }

    /// Records that the search was answered on the thread that took its request.
    pub fn answered_in_place(&self) {
        self.shared.in_place.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that the search ran past its deadline and was cancelled.
    pub fn timed_out(&self) {
        self.shared.timed_out.fetch_add(1, Ordering::Relaxed);
    }
}

/// Says what a search refused after waiting `search_timeout` waited behind. An established
/// client's plain search is a warning (heavy or not: a well-behaved client judged heavy is what
/// the gate is to avoid); a raw query's or a new client's is the gate doing its job (debug).
fn log_waited_too_long(shared: &Shared, client: &SearchClient, raw: bool) {
    let queue = lock(&shared.queue);
    let holders = queue.holders_text(Instant::now());
    let waiting = queue.waiters.len();
    let Some(average) = lock(&client.0).average_search else {
        tracing::debug!(%client, %holders, waiting, "a new client's search waited past search_timeout for a slot and was refused busy");
        return;
    };
    let average_ms = average * 1000.0;
    let heavy = average > shared.heavy_search;
    if raw {
        tracing::debug!(%client, average_ms, heavy, %holders, waiting, "a raw search waited past search_timeout for a slot and was refused busy");
    } else {
        tracing::warn!(%client, average_ms, heavy, %holders, waiting, "a search waited past search_timeout for a slot and was refused busy");
    }
}

/// Takes a waiter off the queue however its wait ends (a timeout, or the connection going
/// away mid-wait); a waiter already granted is gone from the queue and this does nothing.
struct LeaveQueue<'a> {
    shared: &'a Arc<Shared>,
    ticket: u64,
}

impl Drop for LeaveQueue<'_> {
    fn drop(&mut self) {
        let mut queue = lock(&self.shared.queue);
        queue.waiters.retain(|waiter| waiter.ticket != self.ticket);
    }
}

impl SearchGate {
    pub fn new(limits: SearchLimits) -> SearchGate {
        // Half the time limit: the searches that run into it are what hold slots.
        SearchGate::with_heavy_search(limits, (limits.timeout / 2).min(HEAVY_SEARCH))
    }

    fn with_heavy_search(limits: SearchLimits, heavy_search: Duration) -> SearchGate {
        let max_concurrent = limits.max_concurrent.max(1);
        SearchGate {
            limits: SearchLimits {
                max_concurrent,
                ..limits
            },
            shared: Arc::new(Shared {
                max_concurrent,
                heavy_search: heavy_search.as_secs_f64(),
                queue: Mutex::new(Queue::default()),
                peak_running: AtomicUsize::new(0),
                refused_busy: AtomicU64::new(0),
                timed_out: AtomicU64::new(0),
                in_place: AtomicU64::new(0),
            }),
        }
    }

    pub fn limits(&self) -> SearchLimits {
        self.limits
    }

    /// Waits for a slot (at most `timeout`), or refuses at once when the queue is full; the
    /// client is the current request's (`CURRENT_CLIENT`).
    pub async fn acquire(&self) -> Result<SearchPermit, GateError> {
        self.acquire_as(SearchClient::current(), false).await
    }

    /// `acquire` for a query in SQLite's raw FTS5 syntax: it counts with the heavy searches
    /// whatever its client's average, as a raw query's cost is the query's own (prefixes,
    /// disjunctions), unbounded until its deadline. The soak's raw searchers averaged tens of
    /// milliseconds, so they were not heavy; under load their searches ran to the timeout, held
    /// both slots, and a well-behaved client's search waited past the timeout for one.
    pub async fn acquire_raw(&self) -> Result<SearchPermit, GateError> {
        self.acquire_as(SearchClient::current(), true).await
    }

    #[cfg(test)]
    async fn acquire_for(&self, client: SearchClient) -> Result<SearchPermit, GateError> {
        self.acquire_as(client, false).await
    }

    async fn acquire_as(&self, client: SearchClient, raw: bool) -> Result<SearchPermit, GateError> {
        let shared = &self.shared;
        let max_waiting = self.limits.max_concurrent * QUEUED_PER_SLOT;
        let heavy = raw || client.is_limited(shared.heavy_search);
        let (grant, mut granted) = oneshot::channel();
        let ticket = {
            let mut queue = lock(&shared.queue);
            // A socket connection asks one thing at a time; an HTTP face client (one identity
            // over many requests) may ask many at once, and must not fill the queue alone.
            let waiting_of_client = queue
                .waiters
                .iter()
                .filter(|waiter| waiter.client.is(&client))
                .count();
            // Heavy and new clients together leave `max_concurrent` places to the others, so a
            // flood of fresh connections cannot fill the queue before an established client.
            let limited_full = heavy
                && queue.waiters.iter().filter(|waiter| waiter.heavy).count()
                    >= max_waiting - self.limits.max_concurrent;
            if queue.waiters.len() >= max_waiting
                || waiting_of_client >= self.limits.max_concurrent
                || limited_full
            {
                shared.refused_busy.fetch_add(1, Ordering::Relaxed);
                return Err(GateError::Busy {
                    running: queue.running,
                    waiting: queue.waiters.len(),
                    max_concurrent: self.limits.max_concurrent,
                });
            }
            let ticket = queue.next_ticket;
            queue.next_ticket += 1;
            queue.waiters.push_back(Waiter {
                ticket,
                client: client.clone(),
                heavy,
                grant,
            });
            shared.dispatch(&mut queue);
            ticket
        };
        let slot = match granted.try_recv() {
            Ok(slot) => slot,
            Err(_) => {
                let _leave_queue = LeaveQueue { shared, ticket };
                match tokio::time::timeout(self.limits.timeout, &mut granted).await {
                    Ok(Ok(slot)) => slot,
                    // The sender only goes away unsent when the gate is dropped; either way
                    // the caller may try again.
                    Ok(Err(_)) | Err(_) => {
                        shared.refused_busy.fetch_add(1, Ordering::Relaxed);
                        log_waited_too_long(shared, &client, raw);
                        return Err(GateError::WaitedTooLong(self.limits.timeout));
                    }
                }
            }
        };
        let started = Instant::now();
        Ok(SearchPermit {
            deadline: started + self.limits.timeout,
            started,
            work: SearchWork::default(),
            client,
            shared: shared.clone(),
            slot,
        })
    }

    pub fn activity(&self) -> GateActivity {
        let shared = &self.shared;
        let queue = lock(&shared.queue);
        GateActivity {
            running: queue.running,
            waiting: queue.waiters.len(),
            max_concurrent: self.limits.max_concurrent,
            peak_running: shared.peak_running.load(Ordering::Acquire),
            refused_busy: shared.refused_busy.load(Ordering::Relaxed),
            timed_out: shared.timed_out.load(Ordering::Relaxed),
            in_place: shared.in_place.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that has finished one quick search, so neither new nor heavy.
    fn established() -> SearchClient {
        let client = SearchClient::default();
        client.add(Duration::from_millis(1), Duration::from_millis(1));
        client
    }

    #[tokio::test]
    async fn admits_up_to_the_cap_queues_a_bounded_number_and_refuses_the_rest() {
        let gate = SearchGate::new(SearchLimits {
            timeout: Duration::from_millis(200),
            max_concurrent: 2,
        });
        let first = gate.acquire_for(established()).await.expect("first");
        let _second = gate.acquire_for(established()).await.expect("second");
        // A third waits; the slot of the first comes free while it waits.
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.acquire_for(established()).await.map(|_| ()) }
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        while gate.activity().waiting < 1 {
            assert!(Instant::now() < deadline, "the waiter never queued");
            tokio::task::yield_now().await;
        }
        drop(first);
        waiter.await.expect("join").expect("admitted after waiting");
        assert_eq!(gate.activity().peak_running, 2);
        // With both slots held, a waiter gives up after the timeout.
        let third = established();
        let _third = gate.acquire_for(third.clone()).await.expect("third");
        let refused = gate
            .acquire_for(established())
            .await
            .map(|_| ())
            .expect_err("no slot");
        assert!(matches!(refused, GateError::WaitedTooLong(_)), "{refused}");
        assert_eq!(gate.activity().waiting, 0);
        assert_eq!(gate.activity().running, 2);
        // What the refused search waited behind, as the log says it: the two holders.
        let holders = lock(&gate.shared.queue).holders_text(Instant::now());
        assert_eq!(holders.matches("client ").count(), 2, "{holders}");
        assert!(holders.contains(&format!("{third} (")), "{holders}");
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once() {
        let gate = SearchGate::new(SearchLimits {
            timeout: Duration::from_secs(30),
            max_concurrent: 1,
        });
        let _held = gate.acquire_for(established()).await.expect("held");
        let waiters: Vec<_> = (0..QUEUED_PER_SLOT)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.acquire_for(established()).await.map(|_| ()) })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while gate.activity().waiting < QUEUED_PER_SLOT {
            assert!(Instant::now() < deadline, "waiters never queued");
            tokio::task::yield_now().await;
        }
        let started = Instant::now();
        let refused = gate
            .acquire_for(established())
            .await
            .map(|_| ())
            .expect_err("queue full");
        assert!(matches!(refused, GateError::Busy { .. }), "{refused}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(gate.activity().refused_busy, 1);
        waiters.iter().for_each(|waiter| waiter.abort());
    }

    #[tokio::test]
    async fn one_client_asking_many_at_once_cannot_fill_the_queue() {
        let gate = SearchGate::new(SearchLimits {
            timeout: Duration::from_secs(30),
            max_concurrent: 2,
        });
        let greedy = established();
        let _running: Vec<SearchPermit> = vec![
            gate.acquire_for(greedy.clone()).await.expect("first"),
            gate.acquire_for(greedy.clone()).await.expect("second"),
        ];
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (gate, greedy) = (gate.clone(), greedy.clone());
                tokio::spawn(async move { gate.acquire_for(greedy).await.map(|_| ()) })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while gate.activity().waiting < 2 {
            assert!(Instant::now() < deadline, "waiters never queued");
            tokio::task::yield_now().await;
        }
        // Its third waiting search is refused at once, though the queue has room.
        let refused = gate
            .acquire_for(greedy.clone())
            .await
            .map(|_| ())
            .expect_err("the client's own share of the queue is full");
        assert!(matches!(refused, GateError::Busy { .. }), "{refused}");
        // Another client still queues.
        let other = tokio::spawn({
            let gate = gate.clone();
            async move { gate.acquire_for(established()).await.map(|_| ()) }
        });
        while gate.activity().waiting < 3 {
            assert!(Instant::now() < deadline, "the other client never queued");
            tokio::task::yield_now().await;
        }
        other.abort();
        waiters.iter().for_each(|waiter| waiter.abort());
    }

    /// Runs one search of `client` that holds its slot for `held`.
    async fn search_for(gate: &SearchGate, client: &SearchClient, held: Duration) {
        let permit = gate.acquire_for(client.clone()).await.expect("admitted");
        tokio::time::sleep(held).await;
        drop(permit);
    }

    #[tokio::test]
    async fn heavy_clients_leave_a_slot_free_and_a_light_client_goes_first() {
        let gate = SearchGate::with_heavy_search(
            SearchLimits {
                timeout: Duration::from_secs(30),
                max_concurrent: 2,
            },
            Duration::from_millis(20),
        );
        let heavy: Vec<SearchClient> = (0..3).map(|_| SearchClient::default()).collect();
        for client in &heavy {
            search_for(&gate, client, Duration::from_millis(40)).await;
        }
        // Two heavy clients ask at once: one runs, the other waits although a slot is free.
        let first = gate
            .acquire_for(heavy[0].clone())
            .await
            .expect("first heavy");
        let second = tokio::spawn({
            let (gate, client) = (gate.clone(), heavy[1].clone());
            async move { gate.acquire_for(client).await.map(|_| ()) }
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        while gate.activity().waiting < 1 {
            assert!(
                Instant::now() < deadline,
                "the second heavy client never queued"
            );
            tokio::task::yield_now().await;
        }
        assert_eq!(gate.activity().running, 1);
        // A light client takes the slot kept free at once.
        let light = established();
        let light_permit = gate.acquire_for(light.clone()).await.expect("light");
        assert_eq!(gate.activity().running, 2);
        // A third heavy client queues behind the second; a light one queued after both is
        // served first when the light search ends.
        let third = tokio::spawn({
            let (gate, client) = (gate.clone(), heavy[2].clone());
            async move { gate.acquire_for(client).await.map(|_| ()) }
        });
        while gate.activity().waiting < 2 {
            assert!(
                Instant::now() < deadline,
                "the third heavy client never queued"
            );
            tokio::task::yield_now().await;
        }
        let (order_sender, mut order) = tokio::sync::mpsc::unbounded_channel();
        let late_light = tokio::spawn({
            let gate = gate.clone();
            let order_sender = order_sender.clone();
            async move {
                let permit = gate.acquire_for(established()).await;
                let _ = order_sender.send("light");
                permit.map(|_| ())
            }
        });
        while gate.activity().waiting < 3 {
            assert!(
                Instant::now() < deadline,
                "the late light client never queued"
            );
            tokio::task::yield_now().await;
        }
        drop(light_permit);
        late_light.await.expect("join").expect("light admitted");
        assert_eq!(order.recv().await, Some("light"));
        drop(first);
        second.await.expect("join").expect("second heavy admitted");
        third.await.expect("join").expect("third heavy admitted");
    }

    #[tokio::test]
    async fn fresh_clients_take_neither_the_last_slot_nor_the_queue_of_an_established_one() {
        let gate = SearchGate::new(SearchLimits {
            timeout: Duration::from_secs(30),
            max_concurrent: 2,
        });
        let looping = established();
        // Sixteen fresh clients, one search each (the sixteen new socket connections):
        // one runs, the queue keeps room for the others, the rest are refused at once.
        let mut fresh_running = Vec::new();
        let mut fresh_waiting = Vec::new();
        let mut fresh_refused = 0;
        for _ in 0..16 {
            let (fresh_gate, client) = (gate.clone(), SearchClient::default());
            let attempt = tokio::spawn(async move { fresh_gate.acquire_for(client).await });
            tokio::task::yield_now().await;
            let deadline = Instant::now() + Duration::from_secs(5);
            let settled = loop {
                if attempt.is_finished() {
                    break true;
                }
                let activity = gate.activity();
                if activity.running + activity.waiting > fresh_running.len() + fresh_waiting.len() {
                    break false;
                }
                assert!(
                    Instant::now() < deadline,
                    "a fresh client neither ran nor queued"
                );
                tokio::task::yield_now().await;
            };
            if settled {
                match attempt.await.expect("join") {
                    Ok(permit) => fresh_running.push(permit),
                    Err(GateError::Busy { .. }) => fresh_refused += 1,
                    Err(other) => panic!("{other}"),
                }
            } else {
                fresh_waiting.push(attempt);
            }
        }
        assert_eq!(
            fresh_running.len(),
            1,
            "fresh clients share the heavy clients' slots"
        );
        assert_eq!(fresh_waiting.len(), 2 * QUEUED_PER_SLOT - 2);
        assert_eq!(fresh_refused, 16 - 1 - (2 * QUEUED_PER_SLOT - 2));
        // The established client takes the slot left at once, again and again.
        for _ in 0..5 {
            let permit = tokio::time::timeout(
                Duration::from_millis(500),
                gate.acquire_for(looping.clone()),
            )
            .await
            .expect("the established client waited")
            .expect("the established client was refused");
            drop(permit);
        }
        // With the slot held by another established client, it still finds a place to wait.
        let other = gate
            .acquire_for(established())
            .await
            .expect("the other one");
        let waiting = tokio::spawn({
            let (gate, client) = (gate.clone(), looping.clone());
            async move { gate.acquire_for(client).await.map(|_| ()) }
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        while gate.activity().waiting < fresh_waiting.len() + 1 {
            assert!(!waiting.is_finished(), "refused: {:?}", waiting.await);
            assert!(
                Instant::now() < deadline,
                "the established client never queued"
            );
            tokio::task::yield_now().await;
        }
        // It goes before the fresh clients queued ahead of it when the established slot frees.
        drop(other);
        waiting.await.expect("join").expect("admitted");
        fresh_waiting.iter().for_each(|waiter| waiter.abort());
    }

    #[test]
    fn one_slow_search_does_not_make_a_quick_client_heavy_but_slow_searches_do() {
        let threshold = HEAVY_SEARCH.as_secs_f64();
        let quick = SearchClient::default();
        for _ in 0..8 {
            quick.add(Duration::from_millis(5), Duration::from_millis(5));
        }
        quick.add(Duration::from_millis(1600), Duration::from_millis(1600));
        assert!(
            !quick.is_limited(threshold),
            "one slow search made it heavy"
        );
        quick.add(Duration::from_millis(5), Duration::from_millis(5));
        assert!(!quick.is_limited(threshold));
        // A client whose searches keep running long is heavy from its first.
        let slow = SearchClient::default();
        slow.add(Duration::from_millis(900), Duration::from_millis(900));
        assert!(slow.is_limited(threshold));
        for _ in 0..4 {
            slow.add(Duration::from_millis(5), Duration::from_millis(5));
        }
        assert!(
            slow.is_limited(threshold),
            "four quick searches hid a slow client"
        );
    }

    #[tokio::test]
    async fn a_client_is_heavy_by_the_cpu_its_searches_cost_not_by_how_long_they_took() {
        let gate = SearchGate::new(SearchLimits {
            timeout: Duration::from_secs(2),
            max_concurrent: 2,
        });
        let threshold = gate.shared.heavy_search;
        // Slow because the host made it wait (here: asleep), cheap in CPU: light.
        let waited = SearchClient::default();
        let permit = gate.acquire_for(waited.clone()).await.expect("admitted");
        permit
            .work()
            .measure(|| std::thread::sleep(Duration::from_millis(600)));
        drop(permit);
        assert!(
            !waited.is_limited(threshold),
            "a search asleep made it heavy"
        );
        // The same time spent working: heavy.
        let working = SearchClient::default();
        let permit = gate.acquire_for(working.clone()).await.expect("admitted");
        permit.work().measure(|| {
            let start = thread_cpu_time();
            while thread_cpu_time() - start < Duration::from_millis(600) {
                std::hint::black_box(0u64);
            }
        });
        drop(permit);
        assert!(working.is_limited(threshold), "600 ms of CPU left it light");
        // Work not measured costs the time the slot was held.
        let unmeasured = SearchClient::default();
        let permit = gate
            .acquire_for(unmeasured.clone())
            .await
            .expect("admitted");
        std::thread::sleep(Duration::from_millis(600));
        drop(permit);
        assert!(unmeasured.is_limited(threshold));
    }

    #[tokio::test]
    async fn a_raw_search_of_a_quick_client_takes_only_the_heavy_clients_slot() {
        let gate = SearchGate::new(SearchLimits {
            timeout: Duration::from_millis(300),
            max_concurrent: 2,
        });
        let quick = established();
        let _raw = gate
            .acquire_as(quick.clone(), true)
            .await
            .expect("first raw");
        // A second raw search of the same quick client waits although a slot is free ...
        let refused = gate
            .acquire_as(quick.clone(), true)
            .await
            .map(|_| ())
            .expect_err("the slot left is not a raw search's");
        assert!(matches!(refused, GateError::WaitedTooLong(_)), "{refused}");
        // ... which its plain search (and any quick client's) takes at once.
        let _plain = gate.acquire_for(quick).await.expect("plain");
        assert_eq!(gate.activity().running, 2);
    }

    #[tokio::test]
    async fn only_an_established_client_of_quick_searches_searches_in_place() {
        let gate = SearchGate::new(SearchLimits {
            timeout: Duration::from_secs(30),
            max_concurrent: 2,
        });
        // A new client: nothing says its searches are quick.
        let client = SearchClient::default();
        let first = gate.acquire_for(client.clone()).await.expect("first");
        assert!(!first.is_quick());
        drop(first);
        // After one quick search it is; its raw searches never are.
        assert!(gate
            .acquire_for(client.clone())
            .await
            .expect("second")
            .is_quick());
        let raw = gate.acquire_as(client.clone(), true).await.expect("raw");
        assert!(!raw.is_quick());
        drop(raw);
        // Searches that cost more than `QUICK_SEARCH` on average make it run them elsewhere.
        let slow = SearchClient::default();
        slow.add(Duration::from_millis(3), Duration::from_millis(3));
        assert!(!gate.acquire_for(slow).await.expect("slow").is_quick());
    }

    #[tokio::test]
    async fn a_client_is_new_until_its_first_search_ends() {
        let gate = SearchGate::new(SearchLimits {
            timeout: Duration::from_secs(30),
            max_concurrent: 2,
        });
        let client = SearchClient::default();
        assert!(client.is_limited(gate.shared.heavy_search));
        drop(gate.acquire_for(client.clone()).await.expect("first"));
        assert!(!client.is_limited(gate.shared.heavy_search));
    }
}
