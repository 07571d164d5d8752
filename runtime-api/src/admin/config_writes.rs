//! The warm runtime configurations written: one saved (its body refused before the caller
//! is authenticated when it is not JSON, then checked field by field) or deleted, with the
//! admin token.

use sandgate_proto::admin::v1::{
    DeleteWarmRuntimeConfigRequest, DeleteWarmRuntimeConfigResponse, PutWarmRuntimeConfigRequest,
    PutWarmRuntimeConfigResponse, put_warm_runtime_config_request,
};
use sandgate_proto::error::{ErrorCode, ErrorDetail, decode_json};
use serde::de::IgnoredAny;
use tonic::{Request, Response, Status};

use crate::validation;
use sandgate_store::PutWarmConfig;

use super::configs::{self, Effective, Source};
use super::wire::{ConfigBody, entry, from_proto};
use super::{RuntimeAdminService, store_failed};

impl RuntimeAdminService {
    /// `PutWarmRuntimeConfig`: a body that is not JSON refused before the caller is
    /// authenticated, then the admin token, the configuration checked field by field and
    /// saved.
    pub(super) async fn put_config(
        &self,
        request: Request<PutWarmRuntimeConfigRequest>,
    ) -> Result<Response<PutWarmRuntimeConfigResponse>, Status> {
        // A body that is not JSON at all is refused before the caller is authenticated,
        // as the reference does; its shape is checked after.
        if let Some(put_warm_runtime_config_request::Body::Json(json)) = &request.get_ref().body {
            decode_json::<IgnoredAny>(json)?;
        }
        self.authorize(request.metadata())?;
        let source = sandgate_proto::client_address(&request);
        let PutWarmRuntimeConfigRequest { name, body } = request.into_inner();
        let config = match body {
            Some(put_warm_runtime_config_request::Body::Config(config)) => from_proto(config),
            Some(put_warm_runtime_config_request::Body::Json(json)) => ConfigBody::decode(&json)?,
            None => {
                return Err(validation::single(
                    "missing",
                    vec![sandgate_conversation::LocItem::Key("config".into())],
                    "Field required",
                )
                .into());
            }
        };
        let errors: Vec<_> = configs::check_name(&name)
            .into_iter()
            .chain(configs::check(&config))
            .collect();
        if !errors.is_empty() {
            return Err(validation::failure(errors).into());
        }
        let (installer, _) = self.configs.installer();
        // The pools' size, with this configuration in place of any of its name. (Two
        // replicas saving at once may pass this together; the reconciler holds the total.)
        let (effective, _) = self.configs.effective().await.map_err(store_failed)?;
        let others: i64 = effective
            .iter()
            .filter(|other| other.name != name)
            .map(|other| other.count.max(0))
            .fold(0, i64::saturating_add);
        let errors = self
            .configs
            .limits()
            .check(installer.count_of(&config), others);
        if !errors.is_empty() {
            return Err(validation::failure(errors).into());
        }
        let taken_by = match installer.image_clash(&name, &config.image, self.configs.overlay()) {
            Some(other) => Some(other.to_owned()),
            None => match self
                .store
                .warm_configs
                .put_warm_config(&name, &config)
                .await
                .map_err(store_failed)?
            {
                PutWarmConfig::Saved => None,
                PutWarmConfig::ImageTaken { by } => Some(by),
            },
        };
        if let Some(other) = taken_by {
            return Err(ErrorDetail::new(
                ErrorCode::Conflict,
                format!(
                    "Image {} is already used by configuration \"{other}\"; every configuration needs its own image reference",
                    config.image
                ),
            )
            .into());
        }
        tracing::info!(name = %name, image = %config.image, "warm runtime configuration saved");
        self.configs.notify_changed();
        // What an operator reads of it: the pool's image and size, and the names (never
        // the values) of its environment.
        let detail = serde_json::json!({
            "image": config.image,
            "count": installer.count_of(&config),
            "environment": config.environment.keys().collect::<Vec<_>>(),
        });
        self.audit("warm_config.put", &name, source, detail).await;
        let warnings = installer.missing_defaults(&config);
        let saved = Effective {
            count: installer.count_of(&config),
            name,
            source: Source::Db,
            config,
        };
        Ok(Response::new(PutWarmRuntimeConfigResponse {
            saved: Some(entry(&saved)),
            warnings,
        }))
    }

    /// `DeleteWarmRuntimeConfig`, with the admin token.
    pub(super) async fn delete_config(
        &self,
        request: Request<DeleteWarmRuntimeConfigRequest>,
    ) -> Result<Response<DeleteWarmRuntimeConfigResponse>, Status> {
        self.authorize(request.metadata())?;
        let source = sandgate_proto::client_address(&request);
        let name = request.into_inner().name;
        let deleted = self
            .store
            .warm_configs
            .delete_warm_config(&name)
            .await
            .map_err(store_failed)?;
        if !deleted {
            return Err(ErrorDetail::new(
                ErrorCode::NotFound,
                format!("Configuration \"{name}\" not found"),
            )
            .into());
        }
        tracing::info!(name = %name, "warm runtime configuration deleted");
        self.configs.notify_changed();
        self.audit("warm_config.delete", &name, source, serde_json::Value::Null)
            .await;
        Ok(Response::new(DeleteWarmRuntimeConfigResponse {
            message: format!("Configuration \"{name}\" deleted successfully"),
        }))
    }
}
