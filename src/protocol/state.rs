//! The states and kinds the socket reports, each an enum with its one text form, used alike by
//! serde (the socket), `Display` (the CLI) and, through `as_str` and `FromStr`, the database
//! (`store/sql_text.rs`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A text that names none of an enum's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {text:?}")]
pub struct UnknownName {
    what: &'static str,
    text: String,
}

/// Declares an enum of unit variants with one text per variant, and derives every conversion
/// (`as_str`, `FromStr`, `Display`, serde) from that one table.
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $name:ident ($what:literal) {
            $( $(#[$variant_meta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                match text {
                    $( $text => Ok($name::$variant), )+
                    _ => Err(UnknownName { what: $what, text: text.to_string() }),
                }
            }
        }

        text_conversions!($name);
    };
}

/// `Display` and serde through `as_str` and `FromStr`.
macro_rules! text_conversions {
    ($name:ident) => {
        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.pad(&self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

text_enum! {
    /// Where a server's session stands, as the database records it.
    ServerState ("server state") {
        /// Configured; no session has reported yet.
        Starting => "starting",
        Connecting => "connecting",
        Connected => "connected",
        /// Connected, but the server declares no `resources` capability.
        NoResources => "no_resources",
        Walking => "walking",
        /// The last walk committed; the snapshot is current.
        Synced => "synced",
        /// The last walk failed; the previous snapshot stays, marked stale.
        Failed => "failed",
        /// The connection failed or dropped; a retry is scheduled.
        BackingOff => "backing_off",
        /// Connected, but the push stream cannot be reopened; the snapshot stays, marked stale.
        Reconnecting => "reconnecting",
        Stopped => "stopped",
        /// No longer configured, its snapshot kept and served (`keep_removed`).
        Offline => "offline",
    }
}

text_enum! {
    /// What one change feed entry records.
    ChangeKind ("change kind") {
        Added => "added",
        Removed => "removed",
        Changed => "changed",
        /// Changes of one swap past the per-swap bound; `count` says how many.
        Truncated => "truncated",
    }
}

text_enum! {
    /// What a catalog entry is. The kind is data: one walk, one swap, one feed and one search
    /// serve every kind, and what differs between kinds is in the methods below.
    Kind ("kind") {
        Resource => "resource",
        Template => "template",
        Tool => "tool",
        Prompt => "prompt",
    }
}

impl Kind {
    /// The kinds walked by the generic entry walk (resources and templates keep their own
    /// tables and swap).
    pub const ENTRY_KINDS: &'static [Kind] = &[Kind::Tool, Kind::Prompt];

    /// The server capability that declares the kind, and the name `mirror =` uses.
    pub fn capability(self) -> &'static str {
        match self {
            Kind::Resource | Kind::Template => "resources",
            Kind::Tool => "tools",
            Kind::Prompt => "prompts",
        }
    }

    /// The MCP method that lists the kind.
    pub fn list_method(self) -> &'static str {
        match self {
            Kind::Resource => "resources/list",
            Kind::Template => "resources/templates/list",
            Kind::Tool => "tools/list",
            Kind::Prompt => "prompts/list",
        }
    }

    /// The key of the list in the method's result.
    pub fn list_key(self) -> &'static str {
        match self {
            Kind::Resource => "resources",
            Kind::Template => "resourceTemplates",
            Kind::Tool => "tools",
            Kind::Prompt => "prompts",
        }
    }

    /// The field that identifies an entry within its server.
    pub fn identity_field(self) -> &'static str {
        match self {
            Kind::Resource => "uri",
            Kind::Template => "uriTemplate",
            Kind::Tool | Kind::Prompt => "name",
        }
    }

    /// The notification a server sends when the kind's list changed.
    pub fn list_changed_notification(self) -> &'static str {
        match self {
            Kind::Resource | Kind::Template => "notifications/resources/list_changed",
            Kind::Tool => "notifications/tools/list_changed",
            Kind::Prompt => "notifications/prompts/list_changed",
        }
    }

    /// The key of `subscriptions/listen`'s `notifications` that asks for the kind's changes.
    pub fn listen_key(self) -> &'static str {
        match self {
            Kind::Resource | Kind::Template => "resourcesListChanged",
            Kind::Tool => "toolsListChanged",
            Kind::Prompt => "promptsListChanged",
        }
    }

    /// The kind a `mirror = [...]` name (`resources`, `tools`, `prompts`) selects.
    pub fn from_capability(name: &str) -> Option<Kind> {
        match name {
            "resources" => Some(Kind::Resource),
            "tools" => Some(Kind::Tool),
            "prompts" => Some(Kind::Prompt),
            _ => None,
        }
    }
}

text_enum! {
    /// Who may be served a server's results (2026-07-28 `cacheScope`): `private` results never
    /// cross an authorization context, so a token client of the HTTP face never gets them unless
    /// the server says `share = true`. Ordered: `Private` is the greater (the more private).
    CacheScope ("cache scope") {
        Public => "public",
        Private => "private",
    }
}

impl CacheScope {
    /// The scope a server's page declares: absent (every handshake-era server) is `public`;
    /// anything but `public` is taken as `private`, the side that leaks nothing.
    pub fn of_page(declared: Option<&str>) -> CacheScope {
        match declared {
            None | Some("public") => CacheScope::Public,
            Some(_) => CacheScope::Private,
        }
    }

    /// The scope a result's `cacheScope` value declares (`of_page`); a value that is not a
    /// string is taken as `private`, the side that leaks nothing.
    pub fn of_hint(hint: Option<&serde_json::Value>) -> CacheScope {
        match hint {
            None => CacheScope::Public,
            Some(serde_json::Value::String(scope)) => CacheScope::of_page(Some(scope)),
            Some(_) => CacheScope::Private,
        }
    }
}

text_enum! {
    /// Why a follower walked its upstream mirror instead of following its feed (counted per
    /// server in `catalog/status` and `/metrics`).
    FallbackReason ("fallback reason") {
        /// The follower had no cursor yet (its first walk).
        NoCursor => "no_cursor",
        /// The upstream answered from another database (it started over).
        AnotherDatabase => "another_database",
        /// The feed no longer reaches back to the cursor.
        Pruned => "pruned",
        /// A swap too large to list key by key (a first load's `truncated` row).
        SwapTooLarge => "swap_too_large",
        /// A feed page's seqs went back.
        FeedWentBack => "feed_went_back",
        /// A feed page named more changes than asked.
        FeedPageTooLarge => "feed_page_too_large",
        /// A feed page said `more` and listed nothing.
        FeedStuck => "feed_stuck",
        /// The feed did not end within `max_pages`.
        FeedEndless => "feed_endless",
        /// More keys changed than a follow fetches (`MAX_DELTA_KEYS`).
        TooManyKeys => "too_many_keys",
        /// The changed keys took more than `MAX_DELTA_KEY_BYTES`.
        KeysTooLarge => "keys_too_large",
        /// After the delta the counts differed from the upstream's.
        CountsDiffer => "counts_differ",
    }
}

text_enum! {
    /// The transport a server is configured with.
    TransportKind ("transport") {
        Stdio => "stdio",
        Http => "http",
        Nats => "nats",
    }
}

text_enum! {
    /// The transport a live session actually speaks (an `http` server may turn out to speak
    /// the 2024-11-05 HTTP+SSE transport).
    ConnectedTransport ("connected transport") {
        Stdio => "stdio",
        StreamableHttp => "streamable-http",
        HttpSse => "http+sse",
    }
}

text_enum! {
    /// The two eras of MCP: the handshake era (`initialize`) and the stateless one.
    Era ("era") {
        Legacy => "legacy",
        Modern => "modern",
    }
}

/// How a session learns that its server's list changed, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PushChannel {
    /// Notifications arrive on the child's stdout.
    Stdio,
    /// The handshake era's GET stream.
    GetStream,
    /// The 2024-11-05 transport's one SSE stream.
    SseStream,
    /// A long-lived `subscriptions/listen` request.
    Listen,
    /// A GET stream asked for, not open yet.
    OpeningGetStream,
    /// A `subscriptions/listen` request sent, not answered yet.
    OpeningListen,
    /// The server cannot push, for the reason given: the session polls.
    Polling(String),
}

const POLLING_PREFIX: &str = "polling (";

impl PushChannel {
    pub fn as_str(&self) -> std::borrow::Cow<'static, str> {
        match self {
            PushChannel::Stdio => "stdio notifications".into(),
            PushChannel::GetStream => "GET stream".into(),
            PushChannel::SseStream => "SSE stream".into(),
            PushChannel::Listen => "subscriptions/listen".into(),
            PushChannel::OpeningGetStream => "opening GET stream".into(),
            PushChannel::OpeningListen => "opening subscriptions/listen".into(),
            PushChannel::Polling(reason) => format!("{POLLING_PREFIX}{reason})").into(),
        }
    }

    /// The channel a session has started, still opening where a stream has to open first.
    pub fn opening(started: PushChannel) -> PushChannel {
        match started {
            PushChannel::GetStream => PushChannel::OpeningGetStream,
            PushChannel::Listen => PushChannel::OpeningListen,
            other => other,
        }
    }
}

impl FromStr for PushChannel {
    type Err = UnknownName;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(reason) = text
            .strip_prefix(POLLING_PREFIX)
            .and_then(|rest| rest.strip_suffix(')'))
        {
            return Ok(PushChannel::Polling(reason.to_string()));
        }
        let fixed = [
            PushChannel::Stdio,
            PushChannel::GetStream,
            PushChannel::SseStream,
            PushChannel::Listen,
            PushChannel::OpeningGetStream,
            PushChannel::OpeningListen,
        ];
        fixed
            .into_iter()
            .find(|channel| channel.as_str() == text)
            .ok_or_else(|| UnknownName {
                what: "push channel",
                text: text.to_string(),
            })
    }
}

text_conversions!(PushChannel);

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T>(values: &[T])
    where
        T: fmt::Display + FromStr + PartialEq + fmt::Debug + Serialize,
        T: for<'de> Deserialize<'de>,
        <T as FromStr>::Err: fmt::Debug,
    {
        for value in values {
            let text = value.to_string();
            assert_eq!(&text.parse::<T>().expect("parse"), value);
            let json = serde_json::to_value(value).expect("serialize");
            assert_eq!(json, serde_json::Value::String(text.clone()));
            assert_eq!(
                &serde_json::from_value::<T>(json).expect("deserialize"),
                value
            );
        }
    }

    #[test]
    fn every_value_has_one_text_in_json_and_display() {
        round_trips(ServerState::ALL);
        round_trips(ChangeKind::ALL);
        round_trips(Kind::ALL);
        round_trips(TransportKind::ALL);
        round_trips(ConnectedTransport::ALL);
        round_trips(Era::ALL);
        round_trips(CacheScope::ALL);
        for channel in [
            PushChannel::Stdio,
            PushChannel::GetStream,
            PushChannel::SseStream,
            PushChannel::Listen,
            PushChannel::OpeningGetStream,
            PushChannel::OpeningListen,
            PushChannel::Polling("the server does not declare resources.listChanged".into()),
            PushChannel::Polling("it said (no)".into()),
        ] {
            let json = serde_json::to_value(&channel).expect("serialize");
            assert_eq!(json, serde_json::Value::String(channel.to_string()));
            assert_eq!(
                serde_json::from_value::<PushChannel>(json).expect("deserialize"),
                channel
            );
        }
        assert_eq!(ServerState::BackingOff.to_string(), "backing_off");
        assert!("sinking".parse::<ServerState>().is_err());
        assert!(serde_json::from_str::<ChangeKind>("\"moved\"").is_err());
    }

    #[test]
    fn push_channels_read_as_the_session_writes_them() {
        // Today's sessions report the engine's channel as text; each must parse back.
        let engine = [
            PushChannel::Stdio,
            PushChannel::GetStream,
            PushChannel::SseStream,
            PushChannel::Listen,
            PushChannel::Polling("no listChanged".into()),
        ];
        for channel in engine {
            let shown = channel.to_string();
            let parsed: PushChannel = shown.parse().expect("parse");
            assert_eq!(parsed, channel.clone());
            let opening = format!("opening {shown}");
            if matches!(channel, PushChannel::GetStream | PushChannel::Listen) {
                assert_eq!(
                    opening.parse::<PushChannel>().expect("parse"),
                    PushChannel::opening(channel)
                );
            }
        }
    }
}
