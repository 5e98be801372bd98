//! The upstream's side of the NATS fan-out: each `[nats.publish.NAME]` view goes to a JetStream
//! key-value bucket named after it, one key per entry (`nats::bucket_key`), its value the entry
//! as `catalog/entries` serves it (with its origin `_meta`), a delete marker when it goes.
//! What goes in passes the HTTP face's one view rule (`answer::View`, servers x kinds x stored
//! scope), as a token of the same servers and kinds: nothing private is published unless its
//! server says `share = true`. The publisher tails the change feed by seq and keeps its place
//! in the bucket (`nats::FEED_KEY`), so a restart resumes there; a place it cannot resume from
//! (another database, a pruned feed, a first load too large to list) republishes the view.
//!
//! A republish waits until every server of the view has committed a first load (up to
//! `[daemon] upstream_load_wait`): an upstream restarted on an empty database would otherwise
//! publish an emptier view and delete every other key, and each follower would follow the
//! deletes, emptying the fleet. Puts go out `PUTS_IN_FLIGHT` at a time: one at a time, each
//! waiting for JetStream's acknowledgement, a view of 100,000 entries took minutes.

mod publisher;

pub(crate) use publisher::spawn;
