//! Every route of the edge, each registered with its OpenAPI operation: `routes!` takes
//! only a handler annotated with `#[utoipa::path]` (the path and method come from there,
//! so the router and the document cannot disagree), and the LLM APIs' routes are built
//! with theirs (`llm.rs`, one generic handler). A route cannot enter without an operation
//! (`Documented`), and `tests::every_operation_is_described` fails for an operation that
//! does not say what it does.

use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use crate::state::AppState;
use crate::{
    admin, audit, conversations, health, keys, ledger, llm, model_info, models, openapi, orgs,
    sandboxes, settings, warm_configs, webhook,
};

/// The edge's router while it is built: a route enters it only with its operation
/// (`routes!` of a documented handler, or `llm.rs`'s table), never bare (`OpenApiRouter::
/// route` is not reachable through it).
pub(crate) struct Documented(OpenApiRouter<AppState>);

impl Documented {
    fn new() -> Self {
        Self(OpenApiRouter::with_openapi(openapi::Root::openapi()))
    }

    pub(crate) fn routes(self, route: UtoipaMethodRouter<AppState>) -> Self {
        Self(self.0.routes(route))
    }

    /// The router, and the document of its operations.
    pub(crate) fn split_for_parts(self) -> (Router<AppState>, utoipa::openapi::OpenApi) {
        self.0.split_for_parts()
    }
}

/// The edge's routes and, beside them, the document generated from their operations.
pub(crate) fn api(gateway_body_limit: usize) -> Documented {
    let mut router = Documented::new()
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
        .routes(routes!(admin::challenge))
        .routes(routes!(admin::login))
        .routes(routes!(admin::api_keys))
        .routes(routes!(audit::list))
        .routes(routes!(ledger::conversation))
        .routes(routes!(ledger::rollup))
        .routes(routes!(warm_configs::list_configs))
        .routes(routes!(
            warm_configs::put_config,
            warm_configs::delete_config
        ))
        .routes(routes!(sandboxes::pools))
        .routes(routes!(sandboxes::start))
        .routes(routes!(sandboxes::batch))
        .routes(routes!(sandboxes::session))
        .routes(routes!(sandboxes::list))
        .routes(routes!(sandboxes::pause))
        .routes(routes!(sandboxes::resume))
        .routes(routes!(sandboxes::stop))
        .routes(routes!(models::list))
        .routes(routes!(models::list_unversioned))
        .routes(routes!(models::get))
        .routes(routes!(models::add))
        .routes(routes!(model_info::model_info))
        .routes(routes!(model_info::model_info_unversioned))
        .routes(routes!(model_info::model_group_info))
        .routes(routes!(models::spend_logs))
        .routes(routes!(keys::generate))
        .routes(routes!(keys::info))
        .routes(routes!(keys::update))
        .routes(routes!(keys::delete))
        .routes(routes!(keys::list))
        .routes(routes!(orgs::team_new))
        .routes(routes!(orgs::team_info))
        .routes(routes!(orgs::team_list))
        .routes(routes!(orgs::team_update))
        .routes(routes!(orgs::team_delete))
        .routes(routes!(orgs::member_add))
        .routes(routes!(orgs::member_update))
        .routes(routes!(orgs::member_delete))
        .routes(routes!(orgs::team_block))
        .routes(routes!(orgs::team_unblock))
        .routes(routes!(orgs::user_new))
        .routes(routes!(orgs::user_info))
        .routes(routes!(orgs::user_info_v2))
        .routes(routes!(orgs::user_list))
        .routes(routes!(orgs::user_update))
        .routes(routes!(orgs::user_delete))
        .routes(routes!(orgs::budget_info))
        .routes(routes!(orgs::spend_report));
    for route in llm::routes(gateway_body_limit) {
        router = router.routes(route);
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
    use serde_json::{Map, Value};

    /// The document of the edge's routes with no ConversationInfo.
    fn document() -> Value {
        let (_, generated) = super::api(1).split_for_parts();
        crate::openapi::document(generated, &Map::new())
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
        let document = crate::openapi::document(generated, &Map::new());
        assert_eq!(super::undescribed(&document), ["GET /undescribed"]);
    }

    /// Every operation that takes a body says it answers 413 past the body limit (the
    /// edge's, or the gateway's on the LLM routes): a client generated from the document
    /// knows the answer exists.
    #[test]
    fn every_body_operation_documents_its_413() {
        let document = document();
        let mut bodies = 0;
        let mut undocumented = Vec::new();
        for (path, item) in document["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().into_iter().flatten() {
                if operation.get("requestBody").is_none() {
                    continue;
                }
                bodies += 1;
                if operation["responses"].get("413").is_none() {
                    undocumented.push(format!("{} {path}", method.to_uppercase()));
                }
            }
        }
        assert!(bodies >= 26, "{bodies} operations take a body");
        assert_eq!(undocumented, Vec::<String>::new());
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
