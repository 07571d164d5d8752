//! Query parameters described by types (`IntoParams`), where the document states a
//! default: a parameter listed in a `params(...)` tuple cannot carry one. Each default is
//! the one the service applies when the parameter is absent
//! (`tests/e2e/openapi_defaults.rs` compares them with the services' constants).

use serde::Deserialize;
use utoipa::IntoParams;

/// `GET /api/v1/conversations`'s page size.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ConversationsLimit {
    /// Page size; 0 or absent means 100; more than 1000 means 1000
    // Read as a u32; documented as an int64 up to u32's largest (an int32 would call the
    // upper half wrong).
    #[param(maximum = 4294967295.0, default = 100)]
    #[expect(dead_code, reason = "read from the raw query; here for the document")]
    limit: Option<u64>,
}

/// `GET /api/v1/conversations/{id}/events`'s page size.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsLimit {
    /// Page size; 0 or absent means 100; at most 1000
    #[param(maximum = 4294967295.0, default = 100)]
    #[expect(dead_code, reason = "read from the raw query; here for the document")]
    limit: Option<u64>,
}

/// `GET /list`'s switch.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ShowAll {
    /// Also list paused, recently stopped and failed sandboxes
    #[param(default = false)]
    #[expect(
        dead_code,
        reason = "read from the raw query as FastAPI reads a boolean"
    )]
    show_all: Option<bool>,
}

/// `GET /spend/logs`'s query.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SpendLogsQuery {
    /// At most this many entries
    #[param(value_type = Option<u64>, maximum = 4294967295.0, default = 100)]
    pub(crate) limit: Option<u32>,
    /// Only the calls of this key (the key, or its sha256 hex)
    pub(crate) api_key: Option<String>,
    /// Only the calls of the keys of this user
    pub(crate) user_id: Option<String>,
    /// Only the calls of the keys of this team
    pub(crate) team_id: Option<String>,
    /// Only the calls of this session (conversation)
    pub(crate) session_id: Option<String>,
    /// Only the calls started on or after this day (`2026-03-01`); an RFC 3339 time is
    /// also taken
    #[param(format = Date)]
    pub(crate) start_date: Option<String>,
    /// Only the calls started on or before this day (all of it); or a time
    #[param(format = Date)]
    pub(crate) end_date: Option<String>,
}

/// `GET /key/list`'s page size.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct KeysPageSize {
    /// Keys a page (at most 1000; default 10)
    #[param(minimum = 1, default = 10)]
    #[expect(
        dead_code,
        reason = "read with the rest of the query; here for the document"
    )]
    size: Option<u64>,
}
