//! The store's clock: every time in the database is milliseconds since the Unix epoch (`now_ms`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch now (0 on a clock set before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}
