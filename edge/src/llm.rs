//! The model gateway's LLM APIs (chat completions, responses, messages, token counts,
//! embeddings, completions), each at `/v1/…` and, as LiteLLM's proxy serves them, without
//! `/v1`: one handler per API that streams the gateway's answer through, and each route's
//! operation, built here because the handler is one generic function.

use axum::body::Body;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::Response;
use axum::routing::post;
use std::net::IpAddr;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::models::v1::{Api, CallRequest};
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::SecurityRequirement;
use utoipa::openapi::{Content, Ref, Required, ResponseBuilder};
use utoipa::{PartialSchema, ToSchema};
use utoipa_axum::router::UtoipaMethodRouter;

use crate::client::Peer;
use crate::gateway_types::{AnthropicError, AnthropicErrorBody, ErrorTag, OpenAIError};
use crate::metadata;
use crate::models::{GatewayError, body, client, is_anthropic};
use crate::state::AppState;

/// What the document says of each LLM API.
struct Described {
    api: Api,
    path: &'static str,
    operation_id: &'static str,
    summary: &'static str,
    /// The body's fields beside `model`: name and schema (`None`: any value).
    fields: &'static [(&'static str, Option<Type>)],
}

const APIS: [Described; 6] = [
    Described {
        api: Api::ChatCompletions,
        path: "/chat/completions",
        operation_id: "chat_completion",
        summary: "An OpenAI chat completion, routed to the model's upstream (`gateway_proxy/<m>` or `openai/<provider>/<m>`); with `\"stream\": true` the server-sent events pass through as they arrive. `model` in the answer (and in every chunk) is the name asked for; the `user` field is logged, not forwarded",
        fields: &[
            ("stream", Some(Type::Boolean)),
            ("user", Some(Type::String)),
        ],
    },
    Described {
        api: Api::Responses,
        path: "/responses",
        operation_id: "responses",
        summary: "OpenAI's Responses API, routed to `{api_base}/v1/responses` (`gateway_proxy/`) or `{api_base}/responses` (`openai/`); with `\"stream\": true` the events pass through as they arrive, `model` in each the name asked for. An `openai/` entry with `responses_api: chat` has it bridged to chat completions and back (streamed events in the Responses API's order); `previous_response_id` is a 400 there",
        fields: &[("input", None), ("stream", Some(Type::Boolean))],
    },
    Described {
        api: Api::Messages,
        path: "/messages",
        operation_id: "messages",
        summary: "Anthropic's Messages API. A `gateway_proxy/` upstream (or an entry with `messages_api: native`) gets it as it is; an `openai/` upstream gets a chat completion translated from it, and its answer is translated back (streamed events in Anthropic's order). What cannot be translated is a 400 naming the field",
        fields: &[
            ("max_tokens", Some(Type::Integer)),
            ("messages", Some(Type::Array)),
            ("system", None),
            ("tools", Some(Type::Array)),
            ("stream", Some(Type::Boolean)),
        ],
    },
    Described {
        api: Api::MessagesCountTokens,
        path: "/messages/count_tokens",
        operation_id: "messages_count_tokens",
        summary: "Anthropic's token count: the upstream's own (`gateway_proxy/`, `messages_api: native`), or the input tokens of a one-token chat completion (`openai/`)",
        fields: &[
            ("messages", Some(Type::Array)),
            ("system", None),
            ("tools", Some(Type::Array)),
        ],
    },
    Described {
        api: Api::Embeddings,
        path: "/embeddings",
        operation_id: "embeddings",
        summary: "OpenAI embeddings, routed like chat completions",
        fields: &[("input", None)],
    },
    Described {
        api: Api::Completions,
        path: "/completions",
        operation_id: "completions",
        summary: "OpenAI (legacy) text completions, routed like chat completions; streamed like them",
        fields: &[("prompt", None), ("stream", Some(Type::Boolean))],
    },
];

/// Every LLM API's routes, with their operations and a body limit of their own
/// (`gateway_body_limit`): closer to the handler than the edge's, so it is the one in
/// effect there.
pub(crate) fn routes(gateway_body_limit: usize) -> Vec<UtoipaMethodRouter<AppState>> {
    const CHAT: i32 = Api::ChatCompletions as i32;
    const RESPONSES: i32 = Api::Responses as i32;
    const MESSAGES: i32 = Api::Messages as i32;
    const COUNT_TOKENS: i32 = Api::MessagesCountTokens as i32;
    const EMBEDDINGS: i32 = Api::Embeddings as i32;
    const COMPLETIONS: i32 = Api::Completions as i32;
    let mut routes = Vec::new();
    for described in &APIS {
        let handler = match described.api {
            Api::ChatCompletions => post(call::<CHAT>),
            Api::Responses => post(call::<RESPONSES>),
            Api::Messages => post(call::<MESSAGES>),
            Api::MessagesCountTokens => post(call::<COUNT_TOKENS>),
            Api::Embeddings => post(call::<EMBEDDINGS>),
            _ => post(call::<COMPLETIONS>),
        };
        let handler = handler.layer(DefaultBodyLimit::max(gateway_body_limit));
        for (prefix, suffix) in [("/v1", ""), ("", "_unversioned")] {
            let mut paths = utoipa::openapi::Paths::new();
            paths.add_path_operation(
                format!("{prefix}{}", described.path),
                vec![HttpMethod::Post],
                operation(described, &format!("{}{suffix}", described.operation_id)),
            );
            let schemas = vec![
                (OpenAIError::name().into_owned(), OpenAIError::schema()),
                (
                    AnthropicError::name().into_owned(),
                    AnthropicError::schema(),
                ),
            ];
            routes.push((schemas, paths, handler.clone()));
        }
    }
    routes
}

/// An LLM API's operation: a JSON object with a `model`, answered by the upstream (JSON or
/// server-sent events) or by the gateway's error in the API's shape.
fn operation(described: &Described, operation_id: &str) -> utoipa::openapi::path::Operation {
    let mut request = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("model", ObjectBuilder::new().schema_type(Type::String))
        .required("model")
        .additional_properties(Some(AdditionalProperties::FreeForm(true)));
    for (name, kind) in described.fields {
        let field = match kind {
            Some(kind) => ObjectBuilder::new().schema_type(kind.clone()),
            None => ObjectBuilder::new().schema_type(utoipa::openapi::schema::SchemaType::AnyValue),
        };
        request = request.property(*name, field);
    }
    let error = if is_anthropic(described.api) {
        AnthropicError::name()
    } else {
        OpenAIError::name()
    };
    let json = |name: &str| Content::new(Some(Ref::from_schema_name(name)));
    let failure = |description: &str, name: &str| {
        ResponseBuilder::new()
            .description(description)
            .content("application/json", json(name))
            .build()
    };
    let header = |name: &str, description: &str| {
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
            .description(Some(description))
            .build()
    };
    let answer = ResponseBuilder::new()
        .description("The upstream's answer: JSON, or `text/event-stream`")
        .content(
            "application/json",
            Content::new(Some(ObjectBuilder::new().schema_type(Type::Object))),
        )
        .content(
            "text/event-stream",
            Content::new(Some(ObjectBuilder::new().schema_type(Type::String))),
        )
        .build();
    OperationBuilder::new()
        .operation_id(Some(operation_id))
        .tag("Model gateway")
        .summary(Some(described.summary))
        .security(SecurityRequirement::new("MasterKey", Vec::<String>::new()))
        .parameter(header(
            "x-gateway-session-id",
            "The conversation id; forwarded untouched when forwarding is on. `x-litellm-session-id` is read when it is absent",
        ))
        .parameter(header(
            "x-gateway-spend-logs-metadata",
            "A JSON string (at most 8 KiB) stored in the spend log; a value that is not JSON is ignored. `x-litellm-spend-logs-metadata` is read when it is absent",
        ))
        .request_body(Some(
            RequestBodyBuilder::new()
                .content("application/json", Content::new(Some(Schema::from(request))))
                .required(Some(Required::True))
                .build(),
        ))
        .response("200", answer)
        .response(
            "400",
            failure(
                "Not a JSON object with a string `model`, or a bare model name on a wildcard entry",
                &error,
            ),
        )
        .response("401", failure("Missing or wrong master key", &error))
        .response("403", failure("A virtual key asking for a model outside its list (`type`: `key_model_access_denied`)", "OpenAIError"))
        .response("404", failure("The model is not in the model list", &error))
        .response("413", ResponseBuilder::new().description("The body is larger than `--gateway-body-limit` (32 MiB by default)").build())
        .response("422", failure("A virtual key over its budget or its session's (`type`: `budget_exceeded`)", "OpenAIError"))
        .response("502", failure("The upstream cannot be reached", &error))
        .response("504", failure("The upstream did not answer in time", &error))
        .response("4XX", ResponseBuilder::new().description("The upstream's own client error (status and body passed through)").build())
        .build()
}

/// A call of the LLM API `API` (an [`Api`] value): `/v1/chat/completions`,
/// `/v1/responses`, `/v1/messages`, …
pub async fn call<const API: i32>(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    payload: Result<Bytes, BytesRejection>,
) -> Response {
    let api = Api::try_from(API).unwrap_or_default();
    match forward(api, &state, (&headers, peer), payload).await {
        Ok(response) => response,
        Err(error) => error.for_api(api),
    }
}

async fn forward(
    api: Api,
    state: &AppState,
    (headers, peer): (&HeaderMap, Option<IpAddr>),
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, GatewayError> {
    let client = client(state)?;
    let payload = body(payload)?;
    let mut stream = client
        .call(metadata::request_from_peer(
            headers,
            peer,
            CallRequest {
                api: api.into(),
                body: payload,
            },
        ))
        .await?;
    let first = match stream.next().await {
        Some(first) => first?,
        None => {
            return Err(GatewayError::new(
                ErrorCode::BadGateway,
                "the model gateway answered nothing",
            ));
        }
    };
    let status = u16::try_from(first.status)
        .ok()
        .and_then(|status| StatusCode::from_u16(status).ok())
        .unwrap_or(StatusCode::BAD_GATEWAY);
    let streamed = sandgate_proto::models::is_event_stream(&first.content_type);
    let content_type = HeaderValue::try_from(first.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/json"));
    let body = if streamed {
        // Server-sent events leave as they arrive. A stream that fails once begun (the
        // upstream reset, or the gateway went away) ends with an error event, as the
        // providers' do, rather than a broken connection.
        let head = futures::stream::iter([Ok::<_, tonic::Status>(first.chunk)]);
        let chunks = head.chain(stream.map(|message| message.map(|message| message.chunk)));
        Body::from_stream(chunks.scan(false, move |ended, chunk| {
            let next = match chunk {
                _ if *ended => None,
                Ok(chunk) => Some(Ok::<_, std::convert::Infallible>(chunk)),
                Err(status) => {
                    *ended = true;
                    Some(Ok(error_event(api, &status)))
                }
            };
            std::future::ready(next)
        }))
    } else {
        // A whole answer (most often one message) leaves as one body with its length:
        // one write instead of a chunked body and its terminator; a failure before its
        // end is still an error answer (nothing has been sent).
        let mut whole = first.chunk;
        while let Some(message) = stream.next().await {
            let chunk = message?.chunk;
            if whole.is_empty() {
                whole = chunk;
            } else {
                let mut joined = BytesMut::from(whole);
                joined.extend_from_slice(&chunk);
                whole = joined.freeze();
            }
        }
        Body::from(whole)
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let answer_headers = response.headers_mut();
    answer_headers.insert(header::CONTENT_TYPE, content_type);
    for passed in first.headers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::try_from(passed.name),
            HeaderValue::try_from(passed.value),
        ) {
            answer_headers.append(name, value);
        }
    }
    Ok(response)
}

/// The last event of a stream that failed after it began, in the API's shape, with the
/// gateway's status (502, or 504 for an upstream that went silent) as its code.
fn error_event(api: Api, status: &tonic::Status) -> Bytes {
    let detail = ErrorDetail::from_status(status);
    let (code, message) = match detail.code() {
        code @ (ErrorCode::BadGateway | ErrorCode::GatewayTimeout) => (code, detail.detail),
        // Not the upstream's failure reported by the gateway, but the gateway's own
        // stream broken (it stopped, or the connection to it failed): its message is a
        // transport's, not for the client.
        _ => {
            tracing::warn!(code = ?status.code(), message = status.message(), "the model gateway's stream failed");
            (
                ErrorCode::BadGateway,
                "the model gateway's stream was interrupted".to_owned(),
            )
        }
    };
    if is_anthropic(api) {
        let event = AnthropicError {
            kind: ErrorTag::Error,
            error: AnthropicErrorBody {
                kind: "api_error".into(),
                message,
            },
        };
        let event = serde_json::to_string(&event).unwrap_or_default();
        return Bytes::from(format!("event: error\ndata: {event}\n\n"));
    }
    let event = sandgate_proto::models::openai_error_of_type(
        code.http_status().as_u16(),
        "upstream_error",
        &message,
        None,
    );
    Bytes::from(format!("data: {}\n\n", String::from_utf8_lossy(&event)))
}
