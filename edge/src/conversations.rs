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
use serde_json::{Map, Value, json};

use crate::error::{ApiError, after_caller};
use crate::state::AppState;
use crate::{body, metadata};

fn rfc3339(timestamp: Option<&prost_types::Timestamp>) -> Value {
    timestamp
        .and_then(|timestamp| {
            let micros =
                timestamp.seconds.checked_mul(1_000_000)? + i64::from(timestamp.nanos / 1_000);
            let mut datetime = speedate::DateTime::from_timestamp(
                micros.div_euclid(1_000_000),
                micros.rem_euclid(1_000_000) as u32,
            )
            .ok()?;
            // The catalog keeps UTC: say so, as the document promises an RFC 3339 time.
            datetime.time.tz_offset = Some(0);
            Some(Value::from(datetime.to_string()))
        })
        .unwrap_or(Value::Null)
}

/// The stored record with the catalog's facts under `sandgate`.
fn rest(conversation: pb::Conversation) -> Value {
    let mut record = match sandgate_proto::json::from_stored::<Value>(&conversation.record_json) {
        Ok(Value::Object(record)) => record,
        _ => Map::new(),
    };
    let lifecycle: Vec<Value> = conversation
        .lifecycle
        .iter()
        .map(|event| {
            json!({
                "kind": event.kind().as_str_name().trim_start_matches("LIFECYCLE_KIND_").to_ascii_lowercase(),
                "execution_status": event.execution_status,
                "updated_at": rfc3339(event.updated_at.as_ref()),
                "received_at": rfc3339(event.received_at.as_ref()),
            })
        })
        .collect();
    record.insert(
        "sandgate".into(),
        json!({
            "execution_status": conversation.execution_status,
            "deleted": conversation.deleted,
            "model": (!conversation.model.is_empty()).then_some(conversation.model),
            "lifecycle": lifecycle,
            "event_count": conversation.event_count,
            "last_event_at": rfc3339(conversation.last_event_at.as_ref()),
        }),
    );
    Value::Object(record)
}

fn conversation(conversation: Option<pb::Conversation>) -> Result<Json<Value>, ApiError> {
    conversation
        .map(|conversation| Json(rest(conversation)))
        .ok_or_else(|| {
            ApiError::Edge(
                http::StatusCode::BAD_GATEWAY,
                "empty answer from the runtime API".into(),
            )
        })
}

pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
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

pub async fn list(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(json!({
        "items": response.conversations.into_iter().map(rest).collect::<Vec<_>>(),
        "next_page_id": next,
    })))
}

fn query_integer(name: &'static str, value: &str) -> Result<u32, ApiError> {
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
pub async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
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
                json!({ "id": event.id, "kind": event.kind, "timestamp": rfc3339(event.timestamp.as_ref()) })
            })
        })
        .collect();
    let next = (!response.next_page_token.is_empty()).then_some(response.next_page_token);
    Ok(Json(json!({ "items": items, "next_page_id": next })))
}

#[derive(Deserialize)]
struct TagsBody {
    tags: BTreeMap<String, String>,
}

pub async fn update_tags(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
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
