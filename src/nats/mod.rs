//! NATS JetStream as the fleet's fan-out engine: the connection (URL and credentials), the
//! bucket's keys (an entry's kind and a digest of its key, since keys are URIs and a bucket's
//! keys may hold only `[-/_=.a-zA-Z0-9]`) and the feed mark an upstream keeps beside its
//! entries. `follow` is a downstream's side; the publisher is `crate::publish`.

mod bucket;
mod error;
pub mod follow;
pub mod round;

pub use bucket::{
    bucket_key, bucket_state, connect, kind_of_bucket_key, open_bucket, FeedMark, FEED_KEY,
};
pub use error::NatsError;
