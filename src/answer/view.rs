//! What a client may see and do: the one rule every answer passes before it is serialized
//! (servers x kinds x scope), and whether it may change the owner's state. The socket's clients
//! are the owner and see everything; the HTTP face gives each token client a restricted view.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::protocol::{CacheScope, ErrorObject, Kind, ScopeRule, NOT_PERMITTED};

/// A client's view of the catalog. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct View {
    /// `None`: the owner (a socket client, or the HTTP face without tokens).
    restriction: Option<Arc<Restriction>>,
    /// Leave out the resources and templates whose URI points at the local machine or a
    /// private network (`[http] hide_flagged_uris`): they carry URI flags in `_meta`.
    hide_flagged_uris: bool,
}

/// What a token client is limited to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Restriction {
    /// The token's name, for the log.
    pub token: String,
    /// The servers it sees; `None`: every server.
    pub servers: Option<BTreeSet<String>>,
    /// The kinds it sees; `None`: every kind.
    pub kinds: Option<BTreeSet<Kind>>,
    /// Servers whose `private` results may be served anyway (`share = true`).
    pub shared: BTreeSet<String>,
    /// The stored scope of each (server, kind) snapshot; one not here is unknown (withheld).
    pub scopes: HashMap<(String, Kind), CacheScope>,
    /// It may call the methods that change the owner's state (`mutate = true`).
    pub may_mutate: bool,
}

impl View {
    /// The owner's view: everything, and every method.
    pub(crate) fn owner() -> View {
        View {
            restriction: None,
            hide_flagged_uris: false,
        }
    }

    pub(crate) fn restricted(restriction: Restriction) -> View {
        View {
            restriction: Some(Arc::new(restriction)),
            hide_flagged_uris: false,
        }
    }

    /// This view, leaving out flagged URIs when `hide` is set.
    pub(crate) fn hiding_flagged_uris(mut self, hide: bool) -> View {
        self.hide_flagged_uris = hide;
        self
    }

    /// Whether the view sees every entry of what it names, so that counts of the catalog may
    /// be checked against what it is given.
    pub(crate) fn sees_whole_catalog(&self) -> bool {
        self.is_owner() && !self.hide_flagged_uris
    }

    /// The one rule (`sees`) and, for a view hiding flagged URIs, an entry (its stored text)
    /// without URI flags.
    pub(crate) fn sees_entry(&self, server: &str, kind: Kind, raw: &str) -> bool {
        self.sees(server, kind) && !(self.hide_flagged_uris && has_uri_flags(raw))
    }

    /// `sees_entry` for an entry known by its URI (a search hit, a URI asked for): the same
    /// pure function of the URI that flagged the entry as it entered.
    pub(crate) fn sees_uri(&self, server: &str, kind: Kind, uri: &str) -> bool {
        use crate::protocol::uri_flags::{classify, template_base};
        let flagged = match kind {
            Kind::Resource => !classify(uri).is_empty(),
            Kind::Template => !classify(template_base(uri)).is_empty(),
            Kind::Tool | Kind::Prompt => false,
        };
        self.sees(server, kind) && !(self.hide_flagged_uris && flagged)
    }

    pub(crate) fn is_owner(&self) -> bool {
        self.restriction.is_none()
    }

    /// The one rule: the view names the server and the kind, and the (server, kind) snapshot
    /// is known to be `public` or its server is shared.
    pub(crate) fn sees(&self, server: &str, kind: Kind) -> bool {
        let Some(restriction) = &self.restriction else {
            return true;
        };
        if !restriction.sees_server(server) {
            return false;
        }
        if let Some(kinds) = &restriction.kinds {
            if !kinds.contains(&kind) {
                return false;
            }
        }
        restriction.shared.contains(server)
            || restriction.scopes.get(&(server.to_string(), kind)) == Some(&CacheScope::Public)
    }

    /// Whether the view names the server and the kind, whatever their scope: what may wake a
    /// client's change notifications, which carry no entry (a stream outlives the scopes read
    /// when it opened, so it does not judge by them).
    pub(crate) fn names(&self, server: &str, kind: Kind) -> bool {
        self.restriction.as_ref().map_or(true, |restriction| {
            restriction.sees_server(server)
                && restriction
                    .kinds
                    .as_ref()
                    .map_or(true, |kinds| kinds.contains(&kind))
        })
    }

    /// The servers a search in this view reads listings of, among `names` (every configured
    /// server), for a search of `kinds`: those it sees any of the kinds of. `None` when it sees
    /// every server's resources and templates among the kinds (the kinds whose keys several
    /// servers list): each key's winner is then the merged catalog's.
    pub(crate) fn searched_servers(
        &self,
        names: &[String],
        kinds: &[Kind],
    ) -> Option<BTreeSet<String>> {
        self.restriction.as_ref()?;
        let merged = [Kind::Resource, Kind::Template];
        let sees_merged = |server: &String| {
            kinds
                .iter()
                .filter(|kind| merged.contains(kind))
                .all(|kind| self.sees(server, *kind))
        };
        if names.iter().all(sees_merged) {
            return None;
        }
        Some(
            names
                .iter()
                .filter(|server| kinds.iter().any(|kind| self.sees(server, *kind)))
                .cloned()
                .collect(),
        )
    }

    /// Whether a read result the server marked `private` may be served to this view: the
    /// owner's, or a shared server's.
    pub(crate) fn sees_private_reads_of(&self, server: &str) -> bool {
        self.restriction
            .as_ref()
            .map_or(true, |restriction| restriction.shared.contains(server))
    }

    /// Whether the view names the server at all (its status, its name in errors).
    pub(crate) fn sees_server(&self, server: &str) -> bool {
        self.restriction
            .as_ref()
            .map_or(true, |restriction| restriction.sees_server(server))
    }

    /// The view's identity as text: equal for two views exactly when every answer they give
    /// from one catalog is equal (the token, its servers and kinds, the shared servers and
    /// the scopes the view judged by). Within one process only: an HTTP validator hashes it.
    pub(crate) fn identity(&self) -> String {
        let Some(restriction) = &self.restriction else {
            return "owner".to_string();
        };
        let scopes: std::collections::BTreeMap<(&str, Kind), CacheScope> = restriction
            .scopes
            .iter()
            .map(|((server, kind), scope)| ((server.as_str(), *kind), *scope))
            .collect();
        format!(
            "{:?} {:?} {:?} {:?} {:?} {}",
            restriction.token,
            restriction.servers,
            restriction.kinds,
            restriction.shared,
            scopes,
            restriction.may_mutate
        )
    }

    /// Refuses a method whose rule is `Mutating` to a view that may not mutate.
    pub(crate) fn admits(&self, method: &str) -> Result<(), ErrorObject> {
        let Some(restriction) = &self.restriction else {
            return Ok(());
        };
        if crate::protocol::scope_rule(method) == Some(ScopeRule::Mutating)
            && !restriction.may_mutate
        {
            tracing::info!(
                token = %restriction.token,
                method,
                "HTTP request refused: the method changes the mirror's state and the token may not (mutate = true)"
            );
            return Err(ErrorObject::new(
                NOT_PERMITTED,
                format!(
                    "{method} changes the mirror's state: only local clients may call it, or a token with `mutate = true` in [http] tokens"
                ),
            ));
        }
        Ok(())
    }
}

/// Whether a stored entry carries URI flags in its `_meta` (the mirror sets the key as entries
/// enter, and removes one a server wrote).
fn has_uri_flags(raw: &str) -> bool {
    use crate::protocol::uri_flags::URI_FLAGS_META_KEY;
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(rename = "_meta", default)]
        meta: Option<serde_json::Map<String, serde_json::Value>>,
    }
    // Most entries do not mention the key at all: no parse for them.
    raw.contains(URI_FLAGS_META_KEY)
        && serde_json::from_str::<Entry>(raw)
            .ok()
            .and_then(|entry| entry.meta)
            .is_some_and(|meta| meta.contains_key(URI_FLAGS_META_KEY))
}

impl Restriction {
    fn sees_server(&self, server: &str) -> bool {
        self.servers
            .as_ref()
            .map_or(true, |servers| servers.contains(server))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(scopes: &[(&str, Kind, CacheScope)]) -> Restriction {
        Restriction {
            token: "fleet".into(),
            scopes: scopes
                .iter()
                .map(|(server, kind, scope)| ((server.to_string(), *kind), *scope))
                .collect(),
            ..Restriction::default()
        }
    }

    #[test]
    fn a_token_sees_public_snapshots_of_its_servers_and_kinds_only() {
        let scopes = [
            ("docs", Kind::Resource, CacheScope::Public),
            ("docs", Kind::Tool, CacheScope::Private),
            ("other", Kind::Resource, CacheScope::Public),
        ];
        let all = View::restricted(view(&scopes));
        assert!(all.sees("docs", Kind::Resource));
        assert!(!all.sees("docs", Kind::Tool), "private");
        assert!(!all.sees("docs", Kind::Prompt), "unknown scope");
        assert!(all.sees("other", Kind::Resource));
        let narrow = View::restricted(Restriction {
            servers: Some(["docs".to_string()].into()),
            kinds: Some([Kind::Resource, Kind::Tool].into()),
            shared: ["docs".to_string()].into(),
            ..view(&scopes)
        });
        assert!(narrow.sees("docs", Kind::Tool), "shared");
        assert!(!narrow.sees("docs", Kind::Prompt), "kind outside the view");
        assert!(
            !narrow.sees("other", Kind::Resource),
            "server outside the view"
        );
        assert!(!narrow.sees_server("other"));
        assert!(View::owner().sees("anything", Kind::Prompt));
    }

    #[test]
    fn a_search_reads_the_servers_a_view_sees_when_it_does_not_see_every_listing() {
        let names = ["docs".to_string(), "other".to_string()];
        let every = [Kind::Resource, Kind::Tool];
        let public = [
            ("docs", Kind::Resource, CacheScope::Public),
            ("other", Kind::Resource, CacheScope::Public),
        ];
        assert_eq!(View::owner().searched_servers(&names, &every), None);
        // Sees every server's resources: the merged catalog's winners are its own, although
        // it sees no tools (their keys are one server's each).
        assert_eq!(
            View::restricted(view(&public)).searched_servers(&names, &every),
            None
        );
        let narrow = View::restricted(Restriction {
            servers: Some(["docs".to_string()].into()),
            ..view(&public)
        });
        let docs: BTreeSet<String> = ["docs".to_string()].into();
        assert_eq!(narrow.searched_servers(&names, &every), Some(docs.clone()));
        // A private snapshot is not seen either: its server's listings do not win in the view.
        let private = View::restricted(view(&[
            ("docs", Kind::Resource, CacheScope::Public),
            ("other", Kind::Resource, CacheScope::Private),
        ]));
        assert_eq!(private.searched_servers(&names, &every), Some(docs));
    }

    #[test]
    fn mutating_methods_need_the_owner_or_a_mutating_token() {
        let token = View::restricted(view(&[]));
        assert_eq!(
            token.admits("catalog/accept").unwrap_err().code,
            NOT_PERMITTED
        );
        assert!(token.admits("catalog/refresh").is_err());
        assert!(token.admits("resources/list").is_ok());
        let trusted = View::restricted(Restriction {
            may_mutate: true,
            ..view(&[])
        });
        assert!(trusted.admits("catalog/refresh").is_ok());
        assert!(View::owner().admits("catalog/accept").is_ok());
    }
}
