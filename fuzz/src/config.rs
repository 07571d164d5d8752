//! The files and values an operator writes: the model gateway's YAML configuration
//! (`GATEWAY_CONFIG`), the installer's warm runtimes file (`WARM_RUNTIMES_FILE`) and the
//! storage quantities `check-config` compares (`EPHEMERAL_STORAGE_SIZE`,
//! `NODE_EPHEMERAL_STORAGE`).

use sandgate::check_config::quantity::{format_bytes, parse_bytes};
use sandgate_model_gw::config::{check_api_base, check_model};
use sandgate_model_gw::{GatewayConfig, environment_references};
use sandgate_runtime_api::admin::configs::{check, check_name};
use sandgate_runtime_api::admin::installer::Installer;
use serde_json::{Value, json};

fn unset(_: &str) -> Option<String> {
    None
}

/// How `check-config` resolves names it cannot see: each stands for itself.
fn as_written(name: &str) -> Option<String> {
    Some(format!("os.environ/{name}"))
}

/// The gateway's configuration: `GatewayConfig::parse`, which the gateway starts and
/// reloads with, and `environment_references`, which `check-config` lists the unset
/// variables with, read one file alike.
pub fn gateway_config(data: &[u8]) {
    // The file is read with `read_to_string`: it is UTF-8 or refused before parsing.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let references = environment_references(text);
    let parsed = GatewayConfig::parse(text, &unset);
    match &references {
        Err(_) => {
            assert!(
                parsed.is_err(),
                "parse accepted a file the references refuse"
            );
            assert!(GatewayConfig::parse(text, &as_written).is_err());
        }
        // Without references the environment is never asked.
        Ok(references) if references.is_empty() => {
            assert_eq!(GatewayConfig::parse(text, &as_written), parsed);
        }
        Ok(references) => assert!(
            parsed.is_err(),
            "parse resolved {:?} in an empty environment",
            references[0].name
        ),
    }
    if let Ok(config) = parsed {
        for entry in &config.models {
            assert_eq!(check_model(&entry.model), Ok(()));
            assert_eq!(check_api_base(&entry.api_base), Ok(()));
        }
        assert_eq!(config.scope.len(), 24, "scope {:?}", config.scope);
    }
}

/// The installer's warm runtimes file: what parses passes every rule a saved
/// configuration must, and writing it back in the file's format reads the same.
pub fn warm_runtimes(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(installer) = Installer::parse(text) else {
        return;
    };
    assert!(installer.count.is_none_or(|count| count >= 0));
    let mut images = std::collections::HashSet::new();
    let mut entries = Vec::new();
    for (name, config) in &installer.configs {
        assert_eq!(check_name(name), None, "{name:?}");
        assert_eq!(check(config), Vec::new(), "{name:?}");
        assert!(
            images.insert(&config.image),
            "image {:?} twice",
            config.image
        );
        assert!(installer.count_of(config) >= 0);
        let mut entry = serde_json::to_value(config)
            .unwrap_or_else(|err| panic!("a configuration does not serialize: {err}"));
        if let Value::Object(members) = &mut entry {
            members.insert("name".to_owned(), Value::from(name.as_str()));
        }
        entries.push(entry);
    }
    let written = json!({ "count": installer.count, "configs": entries }).to_string();
    assert_eq!(
        Installer::parse(&written).as_ref(),
        Ok(&installer),
        "written back: {written}"
    );
    assert_eq!(
        installer.merge(&[], false).len(),
        installer.configs.len(),
        "the installer's configurations are not all in effect"
    );
}

/// A Kubernetes quantity as `check-config` reads it: bytes that write back as themselves.
pub fn storage_quantity(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(bytes) = parse_bytes(text) else {
        return;
    };
    assert_eq!(parse_bytes(&bytes.to_string()), Ok(bytes));
    let shown = format_bytes(bytes);
    if !shown.starts_with('~') {
        assert_eq!(
            parse_bytes(&shown),
            Ok(bytes),
            "{text:?} shown as {shown:?}"
        );
    }
}
