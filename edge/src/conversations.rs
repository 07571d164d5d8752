//! The catalog over REST: `GET /api/v1/conversations/{id}`, `GET /api/v1/conversations`,
//! `PATCH /api/v1/conversations/{id}` and `GET /api/v1/conversations/{id}/events`.

use std::collections::{BTreeMap, HashMap};

use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use bytes::Bytes;
use http::HeaderMap;
use sandgate_proto::conversations::v1::{
    self as pb, GetConversationRequest, ListConversationsRequest, ListEventsRequest,
    UpdateTagsRequest,
};
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, Type};

use crate::catalog::{
    CatalogConversation, CatalogFacts, ConversationPage, EventKind, EventOrder, EventPage,
    EventStub, LifecycleEntry, TagFilter,
};
use crate::error::{ApiError, DetailBody, ValidationBody, after_caller};
use crate::params::{ConversationsLimit, EventsLimit};
use crate::state::AppState;
use crate::{body, metadata};

fn rfc3339(timestamp: Option<&prost_types::Timestamp>) -> Option<String> {
    timestamp.and_then(|timestamp| {
        let micros = timestamp.seconds.checked_mul(1_000_000)? + i64::from(timestamp.nanos / 1_000);
        let mut datetime = speedate::DateTime::from_timestamp(
            micros.div_euclid(1_000_000),
            micros.rem_euclid(1_000_000) as u32,
        )
        .ok()?;
        // The catalog keeps UTC: say so, as the document promises an RFC 3339 time.
        datetime.time.tz_offset = Some(0);
        Some(datetime.to_string())
    })
}

/// The stored record with the catalog's facts under `sandgate`.
fn rest(conversation: pb::Conversation) -> CatalogConversation {
    let mut record = match sandgate_proto::json::from_stored::<Value>(&conversation.record_json) {
        Ok(Value::Object(record)) => record,
        _ => Map::new(),
    };
    // The catalog's facts take the key, whatever the record holds there.
    record.remove("sandgate");
    let lifecycle = conversation
        .lifecycle
        .iter()
        .map(|event| LifecycleEntry {
            kind: event
                .kind()
                .as_str_name()
                .trim_start_matches("LIFECYCLE_KIND_")
                .to_ascii_lowercase(),
            execution_status: event.execution_status.clone(),
            updated_at: rfc3339(event.updated_at.as_ref()),
            received_at: rfc3339(event.received_at.as_ref()),
        })
        .collect();
    CatalogConversation {
        record,
        sandgate: CatalogFacts {
            execution_status: conversation.execution_status,
            deleted: conversation.deleted,
            model: (!conversation.model.is_empty()).then_some(conversation.model),
            lifecycle,
            event_count: conversation.event_count,
            last_event_at: rfc3339(conversation.last_event_at.as_ref()),
        },
    }
}

fn conversation(
    conversation: Option<pb::Conversation>,
) -> Result<Json<CatalogConversation>, ApiError> {
    conversation
        .map(|conversation| Json(rest(conversation)))
        .ok_or_else(|| {
            ApiError::Edge(
                http::StatusCode::BAD_GATEWAY,
                "empty answer from the runtime API".into(),
            )
        })
}

/// The answers a call on one conversation may give besides its own: no valid key, a
/// conversation unknown or not readable with the key, a malformed id, query or body.
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "describes the answers, for the document")]
enum ConversationErrors {
    /// No valid key
    #[response(status = 401)]
    Unauthorized(DetailBody),
    /// Unknown, or not readable with this key
    #[response(status = 404)]
    NotFound(DetailBody),
    /// Validation error
    #[response(status = 422)]
    Invalid(ValidationBody),
}

#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}",
    operation_id = "get_conversation",
    tag = "Conversations",
    summary = "One conversation",
    security(("APIKeyHeader" = []), ("RuntimeAPIKey" = [])),
    params(("id" = uuid::Uuid, Path)),
    responses(
        (status = 200, description = "The stored record (secrets redacted) with its canonical id, current tags and derived sub_conversation_ids, and the catalog's facts under `sandgate`", body = CatalogConversation),
        ConversationErrors,
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<CatalogConversation>, ApiError> {
    let response = state
        .conversations
        .clone()
        .get_conversation(metadata::request(&headers, GetConversationRequest { id }))
        .await?;
    conversation(response.into_inner().conversation)
}

/// `error` (a body or query that does not decode), unless the caller is refused: judged by
/// a read of no conversation.
async fn judged(state: &AppState, headers: &HeaderMap, error: ApiError) -> ApiError {
    let probe = metadata::request(headers, GetConversationRequest::default());
    after_caller(error, state.conversations.clone().get_conversation(probe)).await
}

/// `?parent_id=<uuid>&tag=<key>:<value>&tag=…&limit=<n>&page_id=<token>`
fn list_request(query: Option<&str>) -> Result<ListConversationsRequest, ApiError> {
    let mut request = ListConversationsRequest::default();
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "parent_id" => request.parent_id = value.into_owned(),
            "page_id" => request.page_token = value.into_owned(),
            "tag" => {
                let (key, tag) = value.split_once(':').ok_or_else(|| {
                    ApiError::invalid(
                        "value_error",
                        ["query", "tag"],
                        "Value error, a tag filter is written key:value",
                        Value::from(value.as_ref()),
                    )
                })?;
                request.tags.insert(key.to_owned(), tag.to_owned());
            }
            "limit" => request.page_size = query_integer("limit", &value)?,
            _ => {}
        }
    }
    Ok(request)
}

#[utoipa::path(
    get,
    path = "/api/v1/conversations",
    operation_id = "list_conversations",
    tag = "Conversations",
    summary = "List conversations, ordered by id",
    security(("APIKeyHeader" = []), ("RuntimeAPIKey" = [])),
    params(
        ("parent_id" = Option<String>, Query, description = "Only the children of this conversation (empty: absent)", pattern = r"^([0-9a-fA-F]{32}|(urn:uuid:)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|\{[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\})?$"),
        ("tag" = inline(Option<Vec<TagFilter>>), Query, style = Form, explode, description = "key:value; repeat for several (all must match)"),
        ConversationsLimit,
        ("page_id" = Option<String>, Query, description = "next_page_id of the previous page (empty: absent)", pattern = r"^([0-9a-fA-F]{32}|(urn:uuid:)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|\{[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\})?$"),
    ),
    responses(
        (status = 200, description = "A page", body = ConversationPage),
        (status = 401, description = "No valid key", body = DetailBody),
        (status = 422, description = "Validation error", body = ValidationBody),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<ConversationPage>, ApiError> {
    let request = match list_request(query.as_deref()) {
        Ok(request) => request,
        Err(error) => return Err(judged(&state, &headers, error).await),
    };
    let response = state
        .conversations
        .clone()
        .list_conversations(metadata::request(&headers, request))
        .await?
        .into_inner();
    let next = (!response.next_page_token.is_empty()).then_some(response.next_page_token);
    Ok(Json(ConversationPage {
        items: response.conversations.into_iter().map(rest).collect(),
        next_page_id: next,
    }))
}

pub(crate) fn query_integer(name: &'static str, value: &str) -> Result<u32, ApiError> {
    value.parse().map_err(|_| {
        ApiError::invalid(
            "int_parsing",
            ["query", name],
            "Input should be a valid integer, unable to parse string as an integer",
            Value::from(value),
        )
    })
}

/// A class name, as event kinds are.
fn is_identifier(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

/// `?limit=<n>&page_id=<token>&order=asc|desc&kind=<kind>&kind=…`
fn events_request(id: String, query: Option<&str>) -> Result<ListEventsRequest, ApiError> {
    let mut request = ListEventsRequest {
        conversation_id: id,
        ..ListEventsRequest::default()
    };
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "limit" => request.page_size = query_integer("limit", &value)?,
            "page_id" => request.page_token = value.into_owned(),
            // An event kind is a class name: anything else can match no event.
            "kind" if is_identifier(&value) => request.kinds.push(value.into_owned()),
            "kind" => {
                return Err(ApiError::invalid(
                    "string_pattern_mismatch",
                    ["query", "kind"],
                    "An event kind is a name: letters, digits and '_', not starting with a digit",
                    Value::from(value.as_ref()),
                ));
            }
            "order" => {
                request.descending = match value.as_ref() {
                    "asc" => false,
                    "desc" => true,
                    _ => {
                        return Err(ApiError::invalid(
                            "enum",
                            ["query", "order"],
                            "Input should be 'asc' or 'desc'",
                            Value::from(value.as_ref()),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(request)
}

/// A conversation's events, oldest first unless `order=desc`.
#[utoipa::path(
    get,
    path = "/api/v1/conversations/{id}/events",
    operation_id = "list_conversation_events",
    tag = "Conversations",
    summary = "A conversation's events",
    description = "Ordered by timestamp, then arrival; oldest first unless order=desc. Read rules as for the record.",
    security(("APIKeyHeader" = []), ("RuntimeAPIKey" = [])),
    params(
        ("id" = uuid::Uuid, Path),
        EventsLimit,
        ("page_id" = Option<String>, Query, description = "next_page_id of the previous page", pattern = "^([0-9a-f]{32})?$"),
        ("order" = inline(Option<EventOrder>), Query),
        ("kind" = inline(Option<Vec<EventKind>>), Query, style = Form, explode, description = "Only events of these kinds"),
    ),
    responses(
        (status = 200, description = "One page", body = EventPage),
        ConversationErrors,
        (status = 503, description = "The store is unavailable; retry", body = DetailBody),
    ),
)]
pub async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<EventPage>, ApiError> {
    let request = match events_request(id, query.as_deref()) {
        Ok(request) => request,
        Err(error) => return Err(judged(&state, &headers, error).await),
    };
    let response = state
        .conversations
        .clone()
        .list_events(metadata::request(&headers, request))
        .await?
        .into_inner();
    let items: Vec<Value> = response
        .events
        .iter()
        .map(|event| {
            sandgate_proto::json::from_stored(&event.event_json).unwrap_or_else(|_| {
                let stub = EventStub {
                    id: &event.id,
                    kind: &event.kind,
                    timestamp: rfc3339(event.timestamp.as_ref()),
                };
                serde_json::to_value(stub).unwrap_or(Value::Null)
            })
        })
        .collect();
    let next = (!response.next_page_token.is_empty()).then_some(response.next_page_token);
    Ok(Json(EventPage {
        items,
        next_page_id: next,
    }))
}

/// `PATCH /api/v1/conversations/{id}`'s body: the tags that replace the conversation's.
#[derive(Deserialize, ToSchema)]
struct TagsBody {
    #[schema(schema_with = tags)]
    tags: BTreeMap<String, String>,
}

/// Tags as the models take them: lowercase alphanumeric keys (Python's `$` lets one final
/// newline through), values of at most 256 characters.
fn tags() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[a-z0-9]+\\n?$")),
        ))
        .additional_properties(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(256)),
        ))
}

#[utoipa::path(
    patch,
    path = "/api/v1/conversations/{id}",
    operation_id = "update_conversation_tags",
    tag = "Conversations",
    summary = "Replace a conversation's tags",
    security(("APIKeyHeader" = []), ("RuntimeAPIKey" = [])),
    params(("id" = uuid::Uuid, Path)),
    request_body(content = inline(TagsBody)),
    responses(
        (status = 200, description = "The stored record (secrets redacted) with its canonical id, current tags and derived sub_conversation_ids, and the catalog's facts under `sandgate`", body = CatalogConversation),
        ConversationErrors,
        (status = 413, description = "Body larger than the configured limit", body = DetailBody),
    ),
)]
pub async fn update_tags(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<CatalogConversation>, ApiError> {
    let payload = body::buffered(payload, state.body_limit)?;
    let TagsBody { tags } = match body::decode(&payload) {
        Ok(body) => body,
        Err(error) => return Err(judged(&state, &headers, error).await),
    };
    let request = UpdateTagsRequest {
        id,
        tags: tags.into_iter().collect::<HashMap<_, _>>(),
    };
    let response = state
        .conversations
        .clone()
        .update_tags(metadata::request(&headers, request))
        .await?;
    conversation(response.into_inner().conversation)
}
