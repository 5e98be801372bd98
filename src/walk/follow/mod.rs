//! Following an upstream mcp-mirror through its change feed instead of walking it again: after
//! one full walk, each change costs a page of the feed and the entries of the keys it names
//! (`catalog/changes`, `catalog/entries`), applied as one delta with the cursor, as a
//! Kubernetes reflector lists once and then watches. Resources, URI templates, tools and
//! prompts are followed alike; an answer's entries count only for the keys asked. Anything it cannot account for (a
//! pruned feed, another upstream database, a first load's `truncated` row, counts that
//! disagree afterwards) falls back to one full walk, which moves the cursor too. Tools and
//! prompts come the same way, each kept under its key upstream (`<server>/<name>`).

mod answers;
mod walk_or_follow;

pub use walk_or_follow::walk_or_follow;
