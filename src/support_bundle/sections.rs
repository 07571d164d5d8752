//! The support bundle's sections, each a JSON value built from what the process holds:
//! settings, the store, the warm pools and sandboxes, the model gateway. None reads a
//! secret out on purpose (environment values and keys are left out, names kept); the
//! redaction in `redaction.rs` is the net under that.

use std::time::Instant;

use serde_json::{Value, json};

use sandgate_runtime_api::sandboxes::{PoolCounts, pool_status, state_name};
use sandgate_store::{Store, StoredSandbox, StoredWarmConfig, redact_url};

use super::{MAX_RECORDS, SPEND_LOG_SCANNED, Sources};
use crate::check_config::{self, Finding, Settings};

/// How a secret setting reads: whether it is set (`true`), never its value.
fn secret(value: Option<&str>) -> Value {
    json!(value.is_some_and(|value| !value.is_empty()))
}

/// The effective settings by their environment names; a secret is `true` when set, `false`
/// when not, never its value.
pub fn settings(settings: &Settings) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(rt) = &settings.runtime_api {
        let driver = match rt.sandbox_driver {
            crate::cli::SandboxDriverKind::Local => "local",
            crate::cli::SandboxDriverKind::Process => "process",
            crate::cli::SandboxDriverKind::Kubernetes => "kubernetes",
        };
        out.insert(
            "runtime-api".into(),
            json!({
                "REDIS_URL": rt.redis_url.as_deref().map(redact_url),
                "REDIS_TLS_FILES": rt.redis_tls_files.iter()
                    .map(|(name, path)| (name.to_string(), path.display().to_string()))
                    .collect::<std::collections::BTreeMap<_, _>>(),
                "SANDGATE_WEBHOOK_API_KEYS": rt.webhook_api_keys.len(),
                "DEFAULT_API_KEY": secret(rt.default_api_key.as_deref()),
                "ADMIN_PASSWORD": secret(rt.admin_password.as_deref()),
                "JWT_SECRET": secret(rt.jwt_secret.as_deref()),
                "SANDBOX_KEY_SECRET": secret(rt.sandbox_key_secret.as_deref()),
                "WARM_RUNTIMES_FILE": rt.warm_runtimes_file.as_ref().map(|p| p.display().to_string()),
                "SANDBOX_DRIVER": driver,
                "SANDBOX_NAMESPACE": rt.sandbox_namespace,
                "STORAGE_CLASS": rt.storage_class,
                "SANDBOX_INGRESS_CLASS": rt.sandbox_ingress_class,
                "SANDBOX_TLS_SECRET": rt.sandbox_tls_secret,
                "SANDBOX_PORT": rt.sandbox_port,
                "EPHEMERAL_STORAGE_SIZE": rt.ephemeral_storage_size,
                "RUNTIME_BASE_URL": rt.runtime_base_url,
                "RUNTIME_URL_SEPARATOR": rt.runtime_url_separator,
                "RUNTIME_DISABLE_SSL": rt.runtime_disable_ssl,
                "RUNTIME_URL_PATTERN": rt.runtime_url_pattern,
                "NODE_EPHEMERAL_STORAGE": rt.node_ephemeral_storage,
                "SANDBOX_NODES": rt.sandbox_nodes,
            }),
        );
    }
    if let Some(gw) = &settings.model_gw {
        out.insert(
            "model-gw".into(),
            json!({
                "GATEWAY_CONFIG": gw.gateway_config.as_ref().map(|p| p.display().to_string()),
                "PROXY_MASTER_KEY": secret(gw.proxy_master_key.as_deref()),
            }),
        );
    }
    if let Some(edge) = &settings.edge {
        out.insert(
            "edge".into(),
            json!({
                "SANDGATE_RUNTIME_API_URL": edge.runtime_api_url,
                "SANDGATE_MODEL_GW_URL": edge.model_gw_url,
            }),
        );
    }
    Value::Object(out)
}

/// `check-config`'s findings on the settings the process runs with.
pub fn findings(settings: &Settings) -> Value {
    let findings: Vec<Finding> = check_config::check(settings);
    let items: Vec<Value> = findings
        .iter()
        .map(|finding| {
            json!({
                "severity": format!("{:?}", finding.severity).to_lowercase(),
                "setting": finding.setting,
                // A broken file's error quotes its values: the message says where, not what.
                "message": super::values::hide_quoted(&finding.message),
            })
        })
        .collect();
    json!({
        "errors": findings.iter().filter(|f| f.is_error()).count(),
        "findings": items,
    })
}

/// Which kind of store, its URL without password, and whether it answers (and how fast).
pub async fn store(store: &Store, redis_url: Option<&str>, data_dir: Option<&str>) -> Value {
    let topology = match redis_url {
        None => "embedded (redb, one process)",
        Some(url) if url.contains("+sentinel://") => {
            "redis sentinel (primary followed through failovers)"
        }
        Some(url) if url.contains("+cluster://") => "redis cluster",
        Some(url) if url.starts_with("redis+unix://") => "redis (unix socket)",
        Some(_) => "redis (one primary)",
    };
    let started = Instant::now();
    let ping = store.health.ping().await;
    json!({
        "topology": topology,
        "url": redis_url.map(redact_url),
        "data_dir": data_dir,
        "healthy": ping.is_ok(),
        "error": ping.err().map(|err| err.to_string()),
        "ping_ms": started.elapsed().as_secs_f64() * 1000.0,
    })
}

fn config_summary(config: &StoredWarmConfig) -> Value {
    json!({
        "image": config.image,
        "working_dir": config.working_dir,
        "command": config.command,
        // Names only: environments carry the agents' keys.
        "environment_names": config.environment.keys().collect::<Vec<_>>(),
        "run_as_user": config.run_as_user,
        "run_as_group": config.run_as_group,
        "fs_group": config.fs_group,
        "fuse_s3_mount": config.fuse_s3_mount,
    })
}

fn sandbox_summary(sandbox: &StoredSandbox) -> Value {
    json!({
        "runtime_id": sandbox.runtime_id,
        "start": if sandbox.pool.is_some() { "warm" } else { "cold" },
        "pool": sandbox.pool,
        "session_id": sandbox.session_id,
        "state": state_name(sandbox.state),
        "status_detail": sandbox.status_detail,
        "created_at_ms": sandbox.created_at_ms,
        "changed_at_ms": sandbox.changed_at_ms,
        "restart_count": sandbox.restarts.count,
        "restart_reasons": sandbox.restarts.reasons,
        "image": sandbox.spec.image,
        "environment_names": sandbox.spec.environment.keys().collect::<Vec<_>>(),
    })
}

/// Each pool: its configuration, the sandboxes it has, and why some failed; and the most
/// recent sandbox starts, warm or cold.
pub async fn pools_and_sandboxes(sources: &Sources) -> (Value, Value) {
    let Some(store) = &sources.store else {
        return (json!(null), json!(null));
    };
    let records = match store.sandboxes.sandboxes().await {
        Ok(records) => records,
        Err(err) => {
            let error = json!({ "error": err.to_string() });
            return (error.clone(), error);
        }
    };
    let configs = match &sources.warm_configs {
        Some(source) => match source.effective().await {
            Ok((effective, _)) => effective,
            Err(err) => {
                return (json!({ "error": err.to_string() }), json!(null));
            }
        },
        None => Vec::new(),
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64);
    let mut pools = Vec::new();
    for effective in &configs {
        // As the pools' listing says it (the platform's refusal aside, which only the
        // driver knows).
        let members: Vec<StoredSandbox> = records
            .iter()
            .filter(|record| {
                record.session_id.is_none()
                    && record.pool.as_deref() == Some(effective.name.as_str())
            })
            .cloned()
            .collect();
        let target = effective.count;
        let PoolCounts {
            ready,
            starting,
            failed,
            failures,
            state,
        } = pool_status(&effective.name, &members, target, None, now_ms);
        let restarts: Vec<&String> = records
            .iter()
            .filter(|record| record.pool.as_deref() == Some(effective.name.as_str()))
            .flat_map(|record| record.restarts.reasons.iter())
            .collect();
        pools.push(json!({
            "name": effective.name,
            "source": format!("{:?}", effective.source).to_lowercase(),
            "count": effective.count,
            "ready": ready,
            "starting": starting,
            "failed": failed,
            "failures": failures,
            "state": state,
            "restart_reasons": restarts,
            "config": config_summary(&effective.config),
        }));
    }
    let mut recent: Vec<&StoredSandbox> = records.iter().collect();
    recent.sort_by_key(|record| std::cmp::Reverse(record.created_at_ms));
    let total = recent.len();
    let starts: Vec<Value> = recent
        .into_iter()
        .take(MAX_RECORDS)
        .map(sandbox_summary)
        .collect();
    (
        json!({ "pools": pools }),
        json!({ "total": total, "shown": starts.len(), "sandboxes": starts }),
    )
}

/// The gateway's entries (names, upstream models and bases; never keys), and the recent
/// calls that ended in a non-2xx status.
pub async fn gateway(sources: &Sources) -> (Value, Value) {
    let mut entries = Vec::new();
    // The names the entries route: a failing call's model is shown only when it is one of
    // them, never as a client wrote it.
    let mut known = std::collections::HashSet::new();
    if let Some(config) = &sources.gateway {
        let current = config.current();
        for entry in &current.models {
            if entry.model_name != "*" {
                known.insert(entry.model_name.clone());
            }
            entries.push(json!({
                "model_name": entry.model_name,
                "model": entry.model,
                "api_base": entry.api_base,
                "source": "config",
            }));
        }
        if let Some(store) = &sources.store {
            match store.models.added_models(&current.scope).await {
                Ok(added) => entries.extend(added.iter().map(|model| {
                    known.insert(model.model_name.clone());
                    json!({
                        "model_name": model.model_name,
                        "model": model.model,
                        "api_base": model.api_base,
                        "source": "added",
                        "added_at_ms": model.added_at_ms,
                    })
                })),
                Err(err) => entries.push(json!({ "error": err.to_string() })),
            }
        }
    }
    let errors = match &sources.store {
        Some(store) => match store.spend_log.spend_logs(SPEND_LOG_SCANNED).await {
            Ok(logs) => {
                let failed: Vec<Value> = logs
                    .iter()
                    .filter(|entry| !(200..300).contains(&entry.status))
                    .take(MAX_RECORDS)
                    .map(|entry| {
                        let named = known.contains(&entry.model);
                        json!({
                            "request_id": entry.request_id,
                            "started_at_ms": entry.started_at_ms,
                            "model": if named { entry.model.as_str() } else { "[a name no entry has]" },
                            "upstream_model": named.then_some(&entry.upstream_model),
                            "call_type": entry.call_type,
                            "status": entry.status,
                            "latency_ms": entry.latency_ms,
                        })
                    })
                    .collect();
                json!({ "scanned": logs.len(), "errors": failed })
            }
            Err(err) => json!({ "error": err.to_string() }),
        },
        None => json!(null),
    };
    (json!({ "entries": entries }), errors)
}
