//! What `/model/new` may add: a routable model at an upstream added models may reach
//! (see `egress`), with prices that are prices, in bounded fields, and never a name the
//! configuration file routes unless the operator says it means to take it over.

use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_proto::models::v1::AddModelRequest;
use sandgate_store::{Store, StoredModel};
use tonic::Status;

use crate::budget::Prices;
use crate::config::{GatewayConfig, check_api_base, check_api_key, check_model};
use crate::egress::AllowedHosts;
use crate::routing::{WILDCARD, route};
use crate::support::{error, now_ms};

/// The longest name, model, base URL or key an added model may have: a model entry is
/// read on every call that routes over the added ones, so it stays small.
const MAX_FIELD: usize = 2_048;
/// The largest `model_info` an added model may carry.
const MAX_MODEL_INFO: usize = 16 * 1024;

fn bad(message: impl Into<String>) -> Status {
    error(ErrorCode::BadRequest, message)
}

/// The model a `/model/new` request adds, checked against the hosts added models may
/// reach and the configuration in effect.
pub(crate) fn addition(
    request: AddModelRequest,
    allowed_hosts: &AllowedHosts,
    config: &GatewayConfig,
) -> Result<StoredModel, Status> {
    let AddModelRequest {
        model_name,
        gateway_params,
        replace_configured,
        model_info_json,
    } = request;
    let params = gateway_params.ok_or_else(|| bad("`gateway_params` is required"))?;
    if model_name.is_empty() {
        return Err(bad("`model_name` is required"));
    }
    for (field, value) in [
        ("model_name", &model_name),
        ("model", &params.model),
        ("api_base", &params.api_base),
        ("api_key", &params.api_key),
    ] {
        if value.len() > MAX_FIELD {
            return Err(bad(format!("`{field}` is longer than {MAX_FIELD} bytes")));
        }
    }
    check_model(&params.model).map_err(bad)?;
    check_api_base(&params.api_base).map_err(bad)?;
    check_api_key(&params.api_key).map_err(bad)?;
    if let Some(host) = url::Url::parse(&params.api_base)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        && let Some(refusal) = allowed_hosts.refusal(&host)
    {
        return Err(error(
            ErrorCode::Forbidden,
            format!(
                "api_base refused: {refusal}; added models may not reach it (an operator allows a host with --gateway-allowed-upstream-hosts)"
            ),
        ));
    }
    if model_info_json.len() > MAX_MODEL_INFO {
        return Err(bad(format!(
            "`model_info` is larger than {MAX_MODEL_INFO} bytes"
        )));
    }
    let model_info = (!model_info_json.is_empty())
        .then(|| serde_json::from_slice::<serde_json::Value>(&model_info_json))
        .transpose()
        .map_err(|err| bad(format!("`model_info` is not JSON: {err}")))?
        .filter(|info| !info.is_null());
    if model_info.as_ref().is_some_and(|info| !info.is_object()) {
        return Err(bad("`model_info` must be an object"));
    }
    Prices::from_model_info(model_info.as_ref()).map_err(bad)?;
    check_takeover(config, &model_name, replace_configured)?;
    Ok(StoredModel {
        model_name,
        model: params.model,
        api_base: params.api_base,
        api_key: params.api_key,
        added_at_ms: now_ms(),
        model_info,
    })
}

/// `GATEWAY_MAX_ADDED_MODELS`'s default. With each entry's fields bounded, the added
/// models add at most about 256 × 22 KiB to `/model/info` and 256 × 150 bytes to
/// `/v1/models`, and their entries held in memory stay as small.
pub const DEFAULT_MAX_ADDED_MODELS: usize = 256;

/// Refuses a new name once `max` models are added in `scope` (409); a name added already
/// may be added again (replaced). Counted before the write, so replicas adding at the same
/// moment may pass it by as many as add together.
pub(crate) async fn check_room(
    store: &Store,
    scope: &str,
    name: &str,
    max: usize,
) -> Result<(), Status> {
    let added = store
        .models
        .added_models(scope)
        .await
        .map_err(ErrorDetail::from)?;
    if added.len() >= max && !added.iter().any(|model| model.model_name == name) {
        return Err(error(
            ErrorCode::Conflict,
            format!(
                "{} models are added already, the most the gateway takes (--gateway-max-added-models)",
                added.len()
            ),
        ));
    }
    Ok(())
}

/// Refuses an added name the configuration file routes: its own entries always (the file
/// is changed where it lives), a name its wildcard routes unless `replace` says the
/// addition means to take it over (and that is logged).
fn check_takeover(config: &GatewayConfig, name: &str, replace: bool) -> Result<(), Status> {
    if config.models.iter().any(|entry| entry.model_name == name) {
        return Err(error(
            ErrorCode::Conflict,
            format!(
                "model {name:?} is routed by the gateway's configuration file; change it there"
            ),
        ));
    }
    let by_wildcard = name != WILDCARD
        && route(&config.models, name).is_ok_and(|upstream| upstream.entry == WILDCARD);
    if by_wildcard {
        if !replace {
            return Err(error(
                ErrorCode::Conflict,
                format!(
                    "model {name:?} is routed by the configuration file's wildcard entry: adding it would take its calls over; say `replace_configured: true` to mean it"
                ),
            ));
        }
        tracing::warn!(model_name = %name, "an added model takes over a name the configuration's wildcard routed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelEntry;

    fn config() -> GatewayConfig {
        GatewayConfig {
            models: vec![
                ModelEntry {
                    model_name: "gpt".into(),
                    model: "openai/gpt".into(),
                    api_base: "http://gw/v1".into(),
                    ..ModelEntry::default()
                },
                ModelEntry {
                    model_name: "*".into(),
                    model: "openai/*".into(),
                    api_base: "http://any/v1".into(),
                    ..ModelEntry::default()
                },
            ],
            ..GatewayConfig::default()
        }
    }

    #[test]
    fn configured_names_are_never_taken_and_wildcard_ones_only_when_meant() {
        let config = config();
        assert!(check_takeover(&config, "gpt", true).is_err());
        assert!(check_takeover(&config, "anthropic/claude", false).is_err());
        assert!(check_takeover(&config, "anthropic/claude", true).is_ok());
        assert!(check_takeover(&config, "bare-name", false).is_ok());
    }

    #[test]
    fn a_takeover_refusal_is_a_conflict() {
        let refused = check_takeover(&config(), "gpt", false)
            .err()
            .map(|status| ErrorDetail::from_status(&status).code());
        assert_eq!(refused, Some(ErrorCode::Conflict));
    }
}
