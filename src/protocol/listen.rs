//! The 2026-07-28 `subscriptions/listen` messages the HTTP face sends: its params, the acknowledgement, `list_changed` tagged with the subscription, and the result that ends it.

use serde::{Deserialize, Serialize};

use super::{Notification, PromptsListChanged, ResourcesListChanged, ToolsListChanged};

/// `subscriptions/listen`'s params, as far as the mirror reads them.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListenParams {
    #[serde(default)]
    pub notifications: ListenNotifications,
}

/// Which notifications a listen asks for, and which of them the mirror grants. The face's own
/// tools never change, but the catalog's tools and prompts do: a downstream mirror asks for
/// their changes to follow them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenNotifications {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_list_changed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_list_changed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts_list_changed: Option<bool>,
}

/// `_meta` of every message on a listen stream: the listen request it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionMeta {
    #[serde(rename = "io.modelcontextprotocol/subscriptionId")]
    pub subscription_id: String,
}

/// The params of a notification sent on a listen stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionParams {
    #[serde(rename = "_meta")]
    pub meta: SubscriptionMeta,
}

/// The acknowledgement's params: the subscription and the notifications granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcknowledgedParams {
    #[serde(rename = "_meta")]
    pub meta: SubscriptionMeta,
    pub notifications: ListenNotifications,
}

/// The first message of a listen stream.
pub enum SubscriptionsAcknowledged {}

impl Notification for SubscriptionsAcknowledged {
    const NAME: &'static str = "notifications/subscriptions/acknowledged";
    type Params = AcknowledgedParams;
}

/// `notifications/resources/list_changed` on a listen stream, tagged with its subscription.
pub enum ListenResourcesListChanged {}

impl Notification for ListenResourcesListChanged {
    const NAME: &'static str = ResourcesListChanged::NAME;
    type Params = SubscriptionParams;
}

/// `notifications/tools/list_changed` on a listen stream.
pub enum ListenToolsListChanged {}

impl Notification for ListenToolsListChanged {
    const NAME: &'static str = ToolsListChanged::NAME;
    type Params = SubscriptionParams;
}

/// `notifications/prompts/list_changed` on a listen stream.
pub enum ListenPromptsListChanged {}

impl Notification for ListenPromptsListChanged {
    const NAME: &'static str = PromptsListChanged::NAME;
    type Params = SubscriptionParams;
}

/// The result that ends a listen stream (when the daemon stops).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenResult {
    pub result_type: String,
    #[serde(rename = "_meta")]
    pub meta: SubscriptionMeta,
}

impl ListenResult {
    /// The graceful end of the listen `subscription`.
    pub fn complete(subscription: SubscriptionMeta) -> ListenResult {
        ListenResult {
            result_type: "complete".into(),
            meta: subscription,
        }
    }
}
