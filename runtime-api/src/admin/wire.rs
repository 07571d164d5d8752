//! A warm runtime configuration as the RuntimeAdmin API carries it: the REST body a
//! save sends (spec 2.1), and the protobuf messages of a save and of a list.

use std::collections::BTreeMap;

use sandgate_proto::admin::v1::{self as pb, ConfigSource};
use sandgate_proto::error::{ErrorDetail, decode_json};
use sandgate_store::StoredWarmConfig;
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::configs::{Effective, Source};
use crate::validation;

/// A configuration as a REST body: spec 2.1. The name comes from the path; `name` and
/// `source` in the body are refused rather than ignored, so that a pasted list entry is not
/// silently half-applied, and so is any other unknown field (a typo of `count` would
/// otherwise pass unnoticed).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigBody {
    image: String,
    working_dir: String,
    command: Vec<String>,
    environment: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "sandgate_proto::json::optional_integer")]
    count: Option<i64>,
    #[serde(default, deserialize_with = "sandgate_proto::json::optional_integer")]
    run_as_user: Option<i64>,
    #[serde(default, deserialize_with = "sandgate_proto::json::optional_integer")]
    run_as_group: Option<i64>,
    #[serde(default, deserialize_with = "sandgate_proto::json::optional_integer")]
    fs_group: Option<i64>,
    #[serde(default)]
    fuse_s3_mount: Option<bool>,
    #[serde(default)]
    source: Option<IgnoredAny>,
    #[serde(default)]
    name: Option<IgnoredAny>,
}

impl ConfigBody {
    pub(super) fn decode(json: &[u8]) -> Result<StoredWarmConfig, ErrorDetail> {
        let body: Self = decode_json(json)?;
        let refuse = |field: &str, msg: &str| {
            validation::single(
                "extra_forbidden",
                vec![sandgate_conversation::LocItem::Key(field.to_owned())],
                msg,
            )
        };
        if body.source.is_some() {
            return Err(refuse(
                "source",
                "A saved configuration has no `source`: the server sets it (`file` or `db`)",
            ));
        }
        if body.name.is_some() {
            return Err(refuse(
                "name",
                "The configuration's name is taken from the URL path, not the body",
            ));
        }
        Ok(StoredWarmConfig {
            image: body.image,
            working_dir: body.working_dir,
            command: body.command,
            environment: body.environment,
            count: body.count,
            run_as_user: body.run_as_user,
            run_as_group: body.run_as_group,
            fs_group: body.fs_group,
            fuse_s3_mount: body.fuse_s3_mount,
        })
    }
}

fn source(source: Source) -> ConfigSource {
    match source {
        Source::File => ConfigSource::File,
        Source::Db => ConfigSource::Db,
    }
}

fn to_proto(config: &StoredWarmConfig) -> pb::WarmRuntimeConfig {
    pb::WarmRuntimeConfig {
        image: config.image.clone(),
        working_dir: config.working_dir.clone(),
        command: config.command.clone(),
        environment: config
            .environment
            .iter()
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        count: config.count,
        run_as_user: config.run_as_user,
        run_as_group: config.run_as_group,
        fs_group: config.fs_group,
        fuse_s3_mount: config.fuse_s3_mount,
    }
}

pub(super) fn from_proto(config: pb::WarmRuntimeConfig) -> StoredWarmConfig {
    StoredWarmConfig {
        image: config.image,
        working_dir: config.working_dir,
        command: config.command,
        environment: config.environment.into_iter().collect(),
        count: config.count,
        run_as_user: config.run_as_user,
        run_as_group: config.run_as_group,
        fs_group: config.fs_group,
        fuse_s3_mount: config.fuse_s3_mount,
    }
}

pub(super) fn entry(effective: &Effective) -> pb::WarmRuntimeConfigEntry {
    pb::WarmRuntimeConfigEntry {
        name: effective.name.clone(),
        source: source(effective.source).into(),
        config: Some(to_proto(&effective.config)),
        count: effective.count,
    }
}
