//! [`Settings`] from the command line (flags and the environment, as clap read them), for
//! `check-config` and for each service's start.

use std::collections::BTreeMap;

use super::{EdgeSettings, ModelGwSettings, RuntimeApiSettings, Settings};
use crate::cli::{
    AdminArgs, AuthArgs, CheckConfigArgs, CheckedService, EdgeArgs, GatewayArgs, ModelGwArgs,
    RuntimeApiArgs, SandboxArgs, ServeArgs, StoreArgs,
};

/// An empty value counts as unset, as the services treat it.
fn given(value: Option<&String>) -> Option<String> {
    value.filter(|value| !value.is_empty()).cloned()
}

/// The process environment, for `os.environ/NAME` (names or values that are not UTF-8
/// cannot be referenced, and are left out).
fn process_environment() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect()
}

impl RuntimeApiSettings {
    pub fn from_args(
        store: &StoreArgs,
        auth: &AuthArgs,
        admin: &AdminArgs,
        sandboxes: &SandboxArgs,
    ) -> Self {
        Self {
            shared_store: store.redis.as_ref().is_some_and(|url| !url.is_empty()),
            redis_url: given(store.redis.as_ref()),
            redis_tls_files: [
                ("REDIS_CA_CERT", &store.redis_ca_cert),
                ("REDIS_CLIENT_CERT", &store.redis_client_cert),
                ("REDIS_CLIENT_KEY", &store.redis_client_key),
            ]
            .into_iter()
            .filter_map(|(setting, path)| Some((setting, path.clone()?)))
            .collect(),
            webhook_api_keys: auth
                .webhook_api_keys
                .iter()
                .filter(|key| !key.is_empty())
                .cloned()
                .collect(),
            default_api_key: given(auth.default_api_key.as_ref()),
            admin_password: given(admin.admin_password.as_ref()),
            jwt_secret: given(admin.jwt_secret.as_ref()),
            sandbox_key_secret: given(sandboxes.sandbox_key_secret.as_ref()),
            warm_runtimes_file: admin.warm_runtimes_file.clone(),
            sandbox_driver: sandboxes.sandbox_driver,
            sandbox_namespace: sandboxes.sandbox_namespace.clone(),
            storage_class: given(sandboxes.storage_class.as_ref()),
            sandbox_ingress_class: given(sandboxes.sandbox_ingress_class.as_ref()),
            sandbox_tls_secret: given(sandboxes.sandbox_tls_secret.as_ref()),
            sandbox_port: sandboxes.sandbox_port,
            ephemeral_storage_size: sandboxes.ephemeral_storage_size.clone(),
            runtime_base_url: sandboxes.runtime_base_url.clone(),
            runtime_url_separator: sandboxes.runtime_url_separator.clone(),
            runtime_disable_ssl: sandboxes.runtime_disable_ssl,
            runtime_url_pattern: given(sandboxes.runtime_url_pattern.as_ref()),
            node_ephemeral_storage: given(sandboxes.node_ephemeral_storage.as_ref()),
            sandbox_nodes: sandboxes.sandbox_nodes,
            sandbox_pod_security: sandboxes.sandbox_pod_security,
            start_request: None,
            sandbox_read_only_paths: sandboxes.sandbox_read_only_paths.clone(),
            sandbox_isolation: sandboxes.sandbox_isolation,
        }
    }
}

impl ModelGwSettings {
    pub fn from_args(gateway: &GatewayArgs) -> Self {
        Self {
            gateway_config: gateway.gateway_config.clone(),
            proxy_master_key: given(gateway.proxy_master_key.as_ref()),
            environment: process_environment(),
        }
    }
}

impl Settings {
    /// `serve` runs the runtime API and the model gateway (the edge calls them in-process).
    pub fn serve(args: &ServeArgs) -> Self {
        Self {
            runtime_api: Some(RuntimeApiSettings::from_args(
                &args.store,
                &args.auth,
                &args.admin,
                &args.sandboxes,
            )),
            model_gw: Some(ModelGwSettings::from_args(&args.gateway)),
            edge: None,
        }
    }

    pub fn runtime_api(args: &RuntimeApiArgs) -> Self {
        Self {
            runtime_api: Some(RuntimeApiSettings::from_args(
                &args.store,
                &args.auth,
                &args.admin,
                &args.sandboxes,
            )),
            ..Self::default()
        }
    }

    pub fn model_gw(args: &ModelGwArgs) -> Self {
        Self {
            model_gw: Some(ModelGwSettings::from_args(&args.gateway)),
            ..Self::default()
        }
    }

    pub fn edge(args: &EdgeArgs) -> Self {
        Self {
            edge: Some(EdgeSettings {
                runtime_api_url: Some(args.runtime_api.clone()),
                model_gw_url: given(args.model_gw.as_ref()),
            }),
            ..Self::default()
        }
    }
}

/// What `sandgate check-config --service S` checks: the settings service S reads.
pub fn from_check_config_args(args: &CheckConfigArgs) -> Settings {
    let runtime_api = || RuntimeApiSettings {
        start_request: args.start_request.clone(),
        ..RuntimeApiSettings::from_args(&args.store, &args.auth, &args.admin, &args.sandboxes)
    };
    let model_gw = || ModelGwSettings::from_args(&args.gateway);
    match args.service {
        CheckedService::Serve => Settings {
            runtime_api: Some(runtime_api()),
            model_gw: Some(model_gw()),
            edge: None,
        },
        CheckedService::RuntimeApi => Settings {
            runtime_api: Some(runtime_api()),
            ..Settings::default()
        },
        CheckedService::ModelGw => Settings {
            model_gw: Some(model_gw()),
            ..Settings::default()
        },
        CheckedService::Edge => Settings {
            edge: Some(EdgeSettings {
                runtime_api_url: given(args.runtime_api.as_ref()),
                model_gw_url: given(args.model_gw.as_ref()),
            }),
            ..Settings::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::cli::Cli;

    /// The defaults tests start from are the binary's (read from the command's definition,
    /// so the test's own environment does not matter).
    #[test]
    fn the_test_defaults_are_the_binarys() {
        let cli = Cli::command();
        let check_config = cli
            .find_subcommand("check-config")
            .unwrap_or_else(|| panic!("check-config is a subcommand"));
        let default_of = |id: &str| {
            check_config
                .get_arguments()
                .find(|arg| arg.get_id() == id)
                .and_then(|arg| arg.get_default_values().first())
                .map(|value| value.to_string_lossy().into_owned())
                .unwrap_or_else(|| panic!("{id} has a default"))
        };
        let defaults = RuntimeApiSettings::default();
        assert_eq!(default_of("sandbox_driver"), "local");
        assert_eq!(default_of("sandbox_namespace"), defaults.sandbox_namespace);
        assert_eq!(
            default_of("ephemeral_storage_size"),
            defaults.ephemeral_storage_size
        );
        assert_eq!(default_of("runtime_base_url"), defaults.runtime_base_url);
        assert_eq!(
            default_of("sandbox_port"),
            defaults.sandbox_port.to_string()
        );
        assert_eq!(
            default_of("runtime_url_separator"),
            defaults.runtime_url_separator
        );
        assert_eq!(
            default_of("runtime_disable_ssl"),
            defaults.runtime_disable_ssl.to_string()
        );
        assert_eq!(
            default_of("sandbox_nodes"),
            defaults.sandbox_nodes.to_string()
        );
    }
}
