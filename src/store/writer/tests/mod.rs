//! The writer's tests, on a real database file: a small swap's full scans, the full-text backlog, and first loads in flight.

use std::ops::AsyncFnMut;
use std::time::{Duration, Instant};

use super::full_text::BULK_INDEX_MIN_ROWS;
use super::staged::WalkToCommit;
use super::*;
use crate::protocol::TransportKind;
use crate::store::{schema, SearchRequest, ServerEntry, Store};

mod backlog;
mod first_load;
mod reload;
mod resource_history;
pub(super) mod support;
mod wal;

use support::*;
