//! What the catalog's routes answer, as typed structs the document shows: a conversation
//! with the catalog's facts, pages of conversations and of events; and the items of their
//! queries, which the handlers read whole, as the document describes them.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::openapi::schema::{AdditionalProperties, AllOfBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

/// A conversation as the catalog answers it: the stored record (secrets redacted) with
/// the catalog's facts under `sandgate`.
#[derive(Serialize)]
pub(crate) struct CatalogConversation {
    #[serde(flatten)]
    pub(crate) record: Map<String, Value>,
    pub(crate) sandgate: CatalogFacts,
}

/// What the catalog knows of a conversation beside its record.
#[derive(Serialize, ToSchema)]
pub(crate) struct CatalogFacts {
    pub(crate) execution_status: String,
    pub(crate) deleted: bool,
    /// current_model_id, else acp_model, for ACP agents; agent.llm.model otherwise
    pub(crate) model: Option<String>,
    #[schema(inline)]
    pub(crate) lifecycle: Vec<LifecycleEntry>,
    /// How many agent-server events the catalog keeps for this conversation
    pub(crate) event_count: u64,
    /// The timestamp of its newest kept event
    #[schema(format = DateTime)]
    pub(crate) last_event_at: Option<String>,
}

/// A lifecycle delivery the catalog received.
#[derive(Serialize, ToSchema)]
pub(crate) struct LifecycleEntry {
    #[schema(schema_with = lifecycle_kind)]
    pub(crate) kind: String,
    pub(crate) execution_status: String,
    #[schema(format = DateTime)]
    pub(crate) updated_at: Option<String>,
    #[schema(format = DateTime)]
    pub(crate) received_at: Option<String>,
}

fn lifecycle_kind() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["start", "pause", "resume", "delete"]))
}

impl PartialSchema for CatalogConversation {
    /// The models' ConversationInfo, and `sandgate`.
    fn schema() -> RefOr<Schema> {
        let facts = ObjectBuilder::new().property("sandgate", CatalogFacts::schema());
        AllOfBuilder::new()
            .description(Some("A ConversationInfo record as stored, plus `sandgate`"))
            .item(Ref::from_schema_name("ConversationInfo"))
            .item(facts)
            .into()
    }
}

impl ToSchema for CatalogConversation {}

/// A page of conversations.
#[derive(Serialize, ToSchema)]
pub(crate) struct ConversationPage {
    pub(crate) items: Vec<CatalogConversation>,
    /// Pass as page_id for the next page; null on the last
    pub(crate) next_page_id: Option<String>,
}

/// A string matching `pattern`: a query's item, documented (the query is read whole).
fn text_matching(pattern: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .into()
}

/// A `tag` filter, `key:value`.
pub(crate) struct TagFilter;

impl PartialSchema for TagFilter {
    fn schema() -> RefOr<Schema> {
        text_matching(r"^[a-z0-9]+\n?:[\s\S]{0,256}$")
    }
}

impl ToSchema for TagFilter {}

/// A page of a conversation's events.
#[derive(Serialize, ToSchema)]
pub(crate) struct EventPage {
    /// Each as stored.
    #[schema(value_type = Vec<AgentEvent>)]
    pub(crate) items: Vec<Value>,
    /// Pass as page_id for the next page; null on the last
    pub(crate) next_page_id: Option<String>,
}

/// An agent-server event (openhands.sdk.event), discriminated by kind; stored as received
/// with secrets redacted.
pub(crate) struct AgentEvent;

impl PartialSchema for AgentEvent {
    fn schema() -> RefOr<Schema> {
        let text = || ObjectBuilder::new().schema_type(Type::String);
        ObjectBuilder::new()
            .description(Some("An agent-server event (openhands.sdk.event), discriminated by kind; stored as received with secrets redacted"))
            .property("kind", text())
            .required("kind")
            .property("id", text())
            .property("timestamp", text())
            .property("source", text())
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .into()
    }
}

impl ToSchema for AgentEvent {}

/// What an event that no longer decodes is shown as: what the catalog knows of it.
#[derive(Serialize)]
pub(crate) struct EventStub<'a> {
    pub(crate) id: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) timestamp: Option<String>,
}

/// The order of an event page.
#[derive(ToSchema)]
#[expect(dead_code, reason = "documents the query, which is read as a whole")]
pub(crate) enum EventOrder {
    #[schema(rename = "asc")]
    Asc,
    #[schema(rename = "desc")]
    Desc,
}

/// An event kind: a class name.
pub(crate) struct EventKind;

impl PartialSchema for EventKind {
    fn schema() -> RefOr<Schema> {
        text_matching("^[A-Za-z_][A-Za-z0-9_]*$")
    }
}

impl ToSchema for EventKind {}
