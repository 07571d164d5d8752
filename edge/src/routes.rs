//! Every route of the edge, each registered with its OpenAPI operation: `routes!` takes
//! only a handler annotated with `#[utoipa::path]` (the path and method come from there,
//! so the router and the document cannot disagree), and the LLM APIs' routes are built
//! with theirs (`llm.rs`). `tests::every_operation_is_described` fails when one has no
//! description.

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use sandgate_proto::models::v1::Api;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;
use crate::{admin, conversations, health, keys, models, openapi, sandboxes, settings, webhook};

/// The edge's routes and, beside them, the document generated from their operations.
pub(crate) fn api(gateway_body_limit: usize) -> OpenApiRouter<AppState> {
    let documented = OpenApiRouter::with_openapi(openapi::Root::openapi())
        .routes(routes!(health::health))
        .routes(routes!(health::openapi))
        .routes(routes!(health::liveliness))
        .routes(routes!(health::liveness))
        .routes(routes!(health::readiness))
        .routes(routes!(webhook::receive))
        .routes(routes!(webhook::receive_events))
        .routes(routes!(conversations::list))
        .routes(routes!(conversations::get, conversations::update_tags))
        .routes(routes!(conversations::events))
        .routes(routes!(settings::save, settings::get))
        .routes(routes!(sandboxes::pools))
        .routes(routes!(sandboxes::start))
        .routes(routes!(sandboxes::batch))
        .routes(routes!(sandboxes::session))
        .routes(routes!(sandboxes::list))
        .routes(routes!(sandboxes::pause))
        .routes(routes!(sandboxes::resume))
        .routes(routes!(sandboxes::stop))
        .routes(routes!(admin::challenge))
        .routes(routes!(admin::login))
        .routes(routes!(admin::api_keys))
        .routes(routes!(admin::list_configs))
        .routes(routes!(admin::put_config, admin::delete_config));
    hand_kept(documented, gateway_body_limit)
}

/// Routes whose operations are still in `openapi/hand_kept.json`.
fn hand_kept(
    router: OpenApiRouter<AppState>,
    gateway_body_limit: usize,
) -> OpenApiRouter<AppState> {
    let mut router = router
        .route("/v1/models", get(models::list))
        .route("/models", get(models::list))
        .route("/v1/models/{*id}", get(models::get))
        .route("/model/new", post(models::add))
        .route("/v1/model/info", get(models::model_info))
        .route("/model/info", get(models::model_info))
        .route("/model_group/info", get(models::model_group_info))
        .route("/spend/logs", get(models::spend_logs))
        .route("/key/generate", post(keys::generate))
        .route("/key/info", get(keys::info))
        .route("/key/update", post(keys::update))
        .route("/key/delete", post(keys::delete))
        .route("/key/list", get(keys::list));
    // The model gateway's LLM APIs, each also without `/v1` (as LiteLLM's proxy serves
    // them), with their own body limit: closer to the handler than the edge's, so it is
    // the one in effect there.
    use models::call;
    const CHAT: i32 = Api::ChatCompletions as i32;
    const RESPONSES: i32 = Api::Responses as i32;
    const MESSAGES: i32 = Api::Messages as i32;
    const COUNT_TOKENS: i32 = Api::MessagesCountTokens as i32;
    const EMBEDDINGS: i32 = Api::Embeddings as i32;
    const COMPLETIONS: i32 = Api::Completions as i32;
    let limit = || DefaultBodyLimit::max(gateway_body_limit);
    for prefix in ["/v1", ""] {
        router = router
            .route(
                &format!("{prefix}/chat/completions"),
                post(call::<CHAT>).layer(limit()),
            )
            .route(
                &format!("{prefix}/responses"),
                post(call::<RESPONSES>).layer(limit()),
            )
            .route(
                &format!("{prefix}/messages"),
                post(call::<MESSAGES>).layer(limit()),
            )
            .route(
                &format!("{prefix}/messages/count_tokens"),
                post(call::<COUNT_TOKENS>).layer(limit()),
            )
            .route(
                &format!("{prefix}/embeddings"),
                post(call::<EMBEDDINGS>).layer(limit()),
            )
            .route(
                &format!("{prefix}/completions"),
                post(call::<COMPLETIONS>).layer(limit()),
            );
    }
    router
}

/// The operations of `document` (`METHOD /path`) that say nothing of what they do: no
/// summary nor description, or no response described.
#[cfg(test)]
pub(crate) fn undescribed(document: &serde_json::Value) -> Vec<String> {
    let mut undescribed = Vec::new();
    for (path, item) in document["paths"].as_object().into_iter().flatten() {
        for (method, operation) in item.as_object().into_iter().flatten() {
            let said = |key: &str| {
                operation[key]
                    .as_str()
                    .is_some_and(|text| !text.trim().is_empty())
            };
            let answers = operation["responses"]
                .as_object()
                .is_some_and(|responses| !responses.is_empty());
            if !(said("summary") || said("description")) || !answers {
                undescribed.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    undescribed
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    /// The document of the edge's routes with no ConversationInfo.
    fn document() -> Value {
        let (_, generated) = super::api(1).split_for_parts();
        crate::openapi::document(generated, &json!({}))
    }

    /// Every operation says what it does and what it answers. A route registered with an
    /// operation that does not is caught here; one registered without any cannot be
    /// (`routes!` takes only documented handlers).
    #[test]
    fn every_operation_is_described() {
        let document = document();
        let operations: usize = document["paths"]
            .as_object()
            .expect("paths")
            .values()
            .map(|item| item.as_object().map_or(0, serde_json::Map::len))
            .sum();
        assert!(operations > 50, "{operations} operations");
        assert_eq!(super::undescribed(&document), Vec::<String>::new());
    }

    /// A handler whose annotation gives no description is reported, by its method and
    /// path: the check above can fail.
    #[test]
    fn an_undescribed_route_is_reported() {
        #[utoipa::path(get, path = "/undescribed", responses((status = 200)))]
        async fn undescribed() {}
        let router = super::api(1).routes(utoipa_axum::routes!(undescribed));
        let (_, generated) = router.split_for_parts();
        let document = crate::openapi::document(generated, &json!({}));
        assert_eq!(super::undescribed(&document), ["GET /undescribed"]);
    }

    /// A profile's name is refused when `str::trim` leaves nothing of it (the Settings
    /// service's rule): the document's pattern accepts exactly the names with a
    /// character that is not Rust's whitespace, on every character up to U+FFFF.
    #[test]
    fn a_profile_name_pattern_is_the_services_non_blank_rule() {
        let document = document();
        let pattern =
            document["paths"]["/api/v1/settings/profiles/{profile_name}"]["post"]["parameters"][0]
                ["schema"]["pattern"]
                .as_str()
                .expect("the saved profile's name has a pattern");
        let pattern = fancy_regex::Regex::new(pattern).unwrap();
        for c in (0..=0xffff).filter_map(char::from_u32) {
            let name = format!(" {c}\u{3000}");
            assert_eq!(
                pattern.is_match(&name).unwrap(),
                !name.trim().is_empty(),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }
}
