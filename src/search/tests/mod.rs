//! Unit tests of the search index: query semantics, the merged view, and repair after faults.

use std::path::Path;
use std::time::{Duration, Instant};

use super::schema::SCHEMA_VERSION;
use super::slots::SearcherSlot;
use super::*;
use crate::protocol::IndexPhase as Phase;
use crate::protocol::Kind;
use crate::store::SearchRequest;

mod files;
mod pin;
mod query;
mod support;
mod write;

use support::*;
