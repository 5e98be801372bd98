//! Server events on their way to the session owner: `list_changed` coalesced, the rest in order.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

/// What a connection reports that the session owner must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// `notifications/resources/list_changed`: only a full re-walk is a safe reaction.
    ResourcesListChanged,
    /// `notifications/tools/list_changed` or `prompts/list_changed`: re-walk that kind.
    ListChanged(crate::protocol::Kind),
    /// The server acknowledged our `subscriptions/listen`, agreeing (or not) to send list changes.
    ListenAcknowledged { resources_list_changed: bool },
    /// The listen stream ended, gracefully or not: reopen it and walk (changes may be missed).
    ListenEnded(String),
    /// The GET stream is open for the first time on this connection.
    StreamOpened,
    /// The notification stream came back after a break: walk, changes may have been missed.
    StreamResumed,
    /// The GET stream could not be reopened, for the reason given; the transport keeps trying.
    StreamFailed(String),
    /// The server cannot push changes to us, for the reason given: poll instead.
    PushUnavailable(String),
    /// The connection is gone (the server forgot our session, or a stream broke for good).
    Disconnected(String),
}

/// The sending side, cloned into every task that reads from a server.
///
/// Every sink belongs to an epoch; `renewed` starts a new one, after which events from older
/// sinks (a connection that was discarded while connecting, whose reader may still report
/// that it ended) are dropped instead of reaching the session.
#[derive(Clone)]
pub struct EventSink {
    sender: mpsc::UnboundedSender<(u64, ServerEvent)>,
    epoch: u64,
    current_epoch: Arc<AtomicU64>,
    /// A `list_changed` is queued and not yet taken; more of them add nothing.
    list_changed_queued: Arc<AtomicBool>,
    /// One bit per kind (`kind_bit`) whose `ListChanged` is queued and not yet taken.
    kinds_queued: Arc<AtomicU8>,
    notifications: Arc<AtomicU64>,
}

/// The bit of a kind in `kinds_queued`.
fn kind_bit(kind: crate::protocol::Kind) -> u8 {
    1 << (kind as u8)
}

/// The receiving side, owned by the session actor. It ends when every sink is dropped.
pub struct EventStream {
    receiver: mpsc::UnboundedReceiver<(u64, ServerEvent)>,
    current_epoch: Arc<AtomicU64>,
    list_changed_queued: Arc<AtomicBool>,
    kinds_queued: Arc<AtomicU8>,
    notifications: Arc<AtomicU64>,
}

pub fn channel() -> (EventSink, EventStream) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let current_epoch = Arc::new(AtomicU64::new(0));
    let list_changed_queued = Arc::new(AtomicBool::new(false));
    let notifications = Arc::new(AtomicU64::new(0));
    let kinds_queued = Arc::new(AtomicU8::new(0));
    (
        EventSink {
            sender,
            epoch: 0,
            current_epoch: current_epoch.clone(),
            list_changed_queued: list_changed_queued.clone(),
            kinds_queued: kinds_queued.clone(),
            notifications: notifications.clone(),
        },
        EventStream {
            receiver,
            current_epoch,
            list_changed_queued,
            kinds_queued,
            notifications,
        },
    )
}

impl EventSink {
    /// Counts a `list_changed`; queues one only if none is waiting, so a storm stays one event.
    pub fn list_changed(&self) {
        if self.is_stale() {
            return;
        }
        self.notifications.fetch_add(1, Ordering::Relaxed);
        if !self.list_changed_queued.swap(true, Ordering::AcqRel) {
            let _ = self
                .sender
                .send((self.epoch, ServerEvent::ResourcesListChanged));
        }
    }

    /// Counts a tools or prompts `list_changed`; coalesced per kind like `list_changed`.
    pub fn kind_list_changed(&self, kind: crate::protocol::Kind) {
        if self.is_stale() {
            return;
        }
        self.notifications.fetch_add(1, Ordering::Relaxed);
        let bit = kind_bit(kind);
        if self.kinds_queued.fetch_or(bit, Ordering::AcqRel) & bit == 0 {
            let _ = self
                .sender
                .send((self.epoch, ServerEvent::ListChanged(kind)));
        }
    }

    pub fn send(&self, event: ServerEvent) {
        if self.is_stale() {
            return;
        }
        if event == ServerEvent::ResourcesListChanged {
            self.list_changed();
        } else {
            let _ = self.sender.send((self.epoch, event));
        }
    }

    /// A sink for a new connection that replaces this one: from now on, events sent
    /// through this sink or any older one are dropped.
    pub(crate) fn renewed(&self) -> EventSink {
        let epoch = self.current_epoch.fetch_add(1, Ordering::AcqRel) + 1;
        EventSink {
            epoch,
            ..self.clone()
        }
    }

    fn is_stale(&self) -> bool {
        self.epoch < self.current_epoch.load(Ordering::Acquire)
    }
}

impl EventStream {
    pub async fn recv(&mut self) -> Option<ServerEvent> {
        loop {
            let (epoch, event) = self.receiver.recv().await?;
            if event == ServerEvent::ResourcesListChanged {
                // Taken before the walk it causes starts, so a later notification queues a new one.
                self.list_changed_queued.store(false, Ordering::Release);
            }
            if let ServerEvent::ListChanged(kind) = event {
                self.kinds_queued
                    .fetch_and(!kind_bit(kind), Ordering::AcqRel);
            }
            // Sent by a connection that was replaced before this event was taken.
            if epoch < self.current_epoch.load(Ordering::Acquire) {
                continue;
            }
            return Some(event);
        }
    }

    /// How many `list_changed` notifications arrived on this connection.
    pub fn notifications_received(&self) -> u64 {
        self.notifications.load(Ordering::Relaxed)
    }
}
