//! The model entries calls route over: the configuration's, then those added at runtime
//! (read from the store), kept between calls until the store says a model was added; and
//! the model list a caller sees of them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandgate_proto::error::ErrorDetail;
use sandgate_proto::models::v1::Model;
use sandgate_runtime_api::store::{Store, StoredModel};
use tokio::sync::watch;
use tonic::Status;

use crate::budget::Prices;
use crate::config::{ConfigFile, GatewayConfig, ModelEntry};
use crate::keys::Caller;
use crate::registry::{OPENAI_MODELS, REGISTRY_CREATED};
use crate::routing::WILDCARD;

/// The model entries of the configuration in effect and of the store.
pub(crate) struct Entries {
    store: Store,
    /// The store's generation of added models (see `ModelStore::model_changes`).
    model_changes: watch::Receiver<Option<u64>>,
    /// The entries a chat completion routes over, kept between calls: reading the added
    /// models from the store for each call would put a store round trip before every
    /// upstream call.
    kept: Mutex<Option<KeptEntries>>,
}

/// Model entries kept for routing, and what they were read under.
struct KeptEntries {
    /// The configuration's scope of added models.
    scope: String,
    /// The store's generation of added models before they were read.
    generation: u64,
    read_at: Instant,
    entries: Arc<[ModelEntry]>,
}

/// How long kept entries serve at most, whatever the generation says: a bound on their
/// age should the store's notifications stop without it noticing.
const KEEP_ENTRIES_AT_MOST: Duration = Duration::from_secs(30);

/// An added model as an entry: its prices were checked when it was added.
fn added_entry(model: StoredModel) -> ModelEntry {
    let prices = Prices::from_model_info(model.model_info.as_ref()).unwrap_or_default();
    let params = crate::config::CallParams {
        takes_reasoning: crate::config::takes_reasoning(model.model_info.as_ref()),
        ..crate::config::CallParams::default()
    };
    ModelEntry {
        params,
        model_name: model.model_name,
        model: model.model,
        api_base: model.api_base,
        api_key: model.api_key,
        model_info: model.model_info,
        prices,
        added: true,
        ..ModelEntry::default()
    }
}

impl Entries {
    pub(crate) fn new(store: Store) -> Self {
        Self {
            model_changes: store.models.model_changes(),
            store,
            kept: Mutex::default(),
        }
    }

    /// The entry added under `name`, if one is: one lookup.
    pub(crate) async fn added(
        &self,
        config: &GatewayConfig,
        name: &str,
    ) -> Result<Option<ModelEntry>, Status> {
        let added = self
            .store
            .models
            .added_model(&config.scope, name)
            .await
            .map_err(ErrorDetail::from)?;
        Ok(added.map(added_entry))
    }

    /// Every model entry of `config`, read now: configured, then added.
    pub(crate) async fn read(&self, config: &GatewayConfig) -> Result<Arc<[ModelEntry]>, Status> {
        let added = self
            .store
            .models
            .added_models(&config.scope)
            .await
            .map_err(ErrorDetail::from)?;
        let mut entries = config.models.clone();
        entries.extend(added.into_iter().map(added_entry));
        Ok(entries.into())
    }

    /// The configuration in effect and its model entries, as kept from an earlier call
    /// when no model was added since (`true`: kept), else read now (and kept).
    pub(crate) async fn kept(
        &self,
        config_file: &ConfigFile,
    ) -> Result<(Arc<GatewayConfig>, Arc<[ModelEntry]>, bool), Status> {
        let config = config_file.current();
        // Read before the store is: an addition meanwhile makes what is read stale.
        let generation = *self.model_changes.borrow();
        let kept = self.kept.lock().ok().and_then(|kept| {
            kept.as_ref()
                .filter(|kept| {
                    Some(kept.generation) == generation
                        && kept.scope == config.scope
                        && kept.read_at.elapsed() < KEEP_ENTRIES_AT_MOST
                })
                .map(|kept| kept.entries.clone())
        });
        if let Some(entries) = kept {
            return Ok((config, entries, true));
        }
        let read_at = Instant::now();
        let entries = self.read(&config).await?;
        if let (Some(generation), Ok(mut kept)) = (generation, self.kept.lock()) {
            *kept = Some(KeptEntries {
                scope: config.scope.clone(),
                generation,
                read_at,
                entries: entries.clone(),
            });
        }
        Ok((config, entries, false))
    }
}

/// The model list as `caller` sees it of `entries`: only the models a virtual key may call.
pub(crate) fn model_list(entries: &[ModelEntry], caller: &Caller) -> Vec<Model> {
    let mut ids: Vec<&str> = Vec::with_capacity(entries.len() + OPENAI_MODELS.len());
    for entry in entries.iter() {
        if !ids.contains(&entry.model_name.as_str()) {
            ids.push(&entry.model_name);
        }
    }
    if entries.iter().any(|entry| entry.model_name == WILDCARD) {
        ids.extend(
            OPENAI_MODELS
                .iter()
                .filter(|id| !ids.contains(id))
                .collect::<Vec<_>>(),
        );
    }
    ids.into_iter()
        .filter(|id| caller.may_call(id))
        .map(|id| Model {
            id: id.to_owned(),
            created: REGISTRY_CREATED,
            owned_by: "openai".to_owned(),
        })
        .collect()
}
