//! The warm runtime configurations: saved ones taking pool management over from the
//! installer file (or merged over it in overlay mode), checked field by field, the
//! installer file reread when it changes (and refused at start when unreadable), and the
//! list's ETag.

use std::path::PathBuf;

use reqwest::StatusCode;
use sandgate_runtime_api::admin::installer::InstallerFile;
use serde_json::{Value, json};

use crate::common::{Backend, RUNTIME_KEY};

use super::*;

async fn saving_takes_pool_management_over_from_the_installer(backend: Backend) {
    let file = installer_file(V1_CURRENT);
    let sandgate = start(&backend, Some(&file), &[]).await;
    assert_eq!(
        listed(&sandgate).await,
        [entry("v1_current", "file", V1_CURRENT, 2)]
    );
    let token = login(&sandgate).await;

    // Derived from the default, minus one of its environment keys: a warning names it.
    let mut body = derived("ghcr.io/acme/custom:1");
    body["environment"]
        .as_object_mut()
        .expect("environment")
        .remove("OH_WEBHOOKS_0_BASE_URL");
    body["count"] = 5.into();
    let (status, saved) = put(&sandgate, &token, "custom", &body).await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(saved["name"], "custom");
    assert_eq!(saved["source"], "db");
    assert_eq!(saved["count"], 5);
    assert_eq!(saved["image"], "ghcr.io/acme/custom:1");
    assert_eq!(saved["run_as_user"], 1000);
    assert_eq!(saved["warnings"], json!(["OH_WEBHOOKS_0_BASE_URL"]));

    // Outside overlay mode the saved configurations replace the installer's.
    assert_eq!(
        listed(&sandgate).await,
        [entry("custom", "db", "ghcr.io/acme/custom:1", 5)]
    );

    // A second name for the same image is refused, naming the holder.
    let (status, conflict) =
        put(&sandgate, &token, "copy", &derived("ghcr.io/acme/custom:1")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let detail = conflict["detail"].as_str().expect("detail");
    assert!(detail.contains("\"custom\""), "{detail}");

    // Without a count, the installer-wide count applies.
    let (status, saved) = put(
        &sandgate,
        &token,
        "second",
        &derived("ghcr.io/acme/second:1"),
    )
    .await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(saved["count"], 2);
    assert_eq!(saved["warnings"], json!([]));

    assert_eq!(
        delete(&sandgate, &token, "nope").await,
        (
            StatusCode::NOT_FOUND,
            json!({ "detail": "Configuration \"nope\" not found" })
        )
    );
    // The installer's entry is not API-managed: nothing to delete.
    assert_eq!(
        delete(&sandgate, &token, "v1_current").await.0,
        StatusCode::NOT_FOUND
    );
    for name in ["custom", "second"] {
        assert_eq!(
            delete(&sandgate, &token, name).await,
            (
                StatusCode::OK,
                json!({ "message": format!("Configuration \"{name}\" deleted successfully") })
            )
        );
    }
    // With no saved configuration left, the installer's is in effect again.
    assert_eq!(
        listed(&sandgate).await,
        [entry("v1_current", "file", V1_CURRENT, 2)]
    );
}

async fn overlay_mode_merges_saved_over_installer_entries(backend: Backend) {
    let file = installer_file(V1_CURRENT);
    let sandgate = start(
        &backend,
        Some(&file),
        &["--warm-runtime-config-overlay", "yes"],
    )
    .await;
    let token = login(&sandgate).await;
    let (status, body) = put(
        &sandgate,
        &token,
        "custom",
        &derived("ghcr.io/acme/custom:1"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        listed(&sandgate).await,
        [
            entry("custom", "db", "ghcr.io/acme/custom:1", 2),
            entry("v1_current", "file", V1_CURRENT, 2),
        ]
    );

    // The installer entry stays selectable, so its image is taken.
    let (status, conflict) = put(&sandgate, &token, "copy", &derived(V1_CURRENT)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    assert!(
        conflict["detail"]
            .as_str()
            .expect("detail")
            .contains("\"v1_current\"")
    );

    // A saved entry of the same name overrides the installer's…
    let mut override_body = derived("ghcr.io/openhands/runtime:1.1");
    override_body["count"] = 1.into();
    let (status, body) = put(&sandgate, &token, "v1_current", &override_body).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        listed(&sandgate).await,
        [
            entry("custom", "db", "ghcr.io/acme/custom:1", 2),
            entry("v1_current", "db", "ghcr.io/openhands/runtime:1.1", 1),
        ]
    );
    // …and deleting it makes the installer's effective again, as `file`.
    assert_eq!(
        delete(&sandgate, &token, "v1_current").await.0,
        StatusCode::OK
    );
    assert_eq!(
        listed(&sandgate).await,
        [
            entry("custom", "db", "ghcr.io/acme/custom:1", 2),
            entry("v1_current", "file", V1_CURRENT, 2),
        ]
    );
    assert_eq!(
        delete(&sandgate, &token, "v1_current").await.0,
        StatusCode::NOT_FOUND
    );
}

async fn saved_configurations_are_checked_field_by_field(backend: Backend) {
    let sandgate = start(&backend, None, &[]).await;
    let token = login(&sandgate).await;
    let with = |field: &str, value: Value| {
        let mut body = derived("img:checked");
        body[field] = value;
        body
    };
    let without = |field: &str| {
        let mut body = derived("img:checked");
        body.as_object_mut().expect("object").remove(field);
        body
    };
    for (name, body, loc, error_type) in [
        (
            "custom",
            with("source", "db".into()),
            json!(["body", "source"]),
            "extra_forbidden",
        ),
        (
            "custom",
            with("name", "custom".into()),
            json!(["body", "name"]),
            "extra_forbidden",
        ),
        (
            "custom",
            with("cont", 2.into()),
            json!(["body", "cont"]),
            "extra_forbidden",
        ),
        (
            "custom",
            without("image"),
            json!(["body", "image"]),
            "missing",
        ),
        (
            "custom",
            without("environment"),
            json!(["body", "environment"]),
            "missing",
        ),
        (
            "custom",
            with("count", (-1).into()),
            json!(["body", "count"]),
            "greater_than_equal",
        ),
        (
            "custom",
            with("run_as_user", (-1).into()),
            json!(["body", "run_as_user"]),
            "greater_than_equal",
        ),
        (
            "custom",
            with("count", "two".into()),
            json!(["body", "count"]),
            "int_type",
        ),
        (
            "custom",
            with("command", "server".into()),
            json!(["body", "command"]),
            "list_type",
        ),
        (
            "custom",
            with("environment", json!({"A": 1})),
            json!(["body", "environment", "A"]),
            "string_type",
        ),
        (
            "custom",
            with("working_dir", "relative".into()),
            json!(["body", "working_dir"]),
            "value_error",
        ),
        (
            "custom",
            with("image", "".into()),
            json!(["body", "image"]),
            "string_too_short",
        ),
        (
            "-bad-",
            derived("img:checked"),
            json!(["path", "name"]),
            "string_pattern_mismatch",
        ),
    ] {
        let (status, body) = put(&sandgate, &token, name, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{loc}: {body}");
        assert_eq!(body["detail"][0]["loc"], loc, "{body}");
        assert_eq!(body["detail"][0]["type"], error_type, "{body}");
    }
    let (status, body) = json_of(
        sandgate
            .client
            .put(sandgate.url("/api/admin/warm-runtime-configs/custom"))
            .bearer_auth(&token)
            .body("{not json")
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["type"], "json_invalid");

    // Authentication comes before the body is looked at.
    let (status, _) = put(
        &sandgate,
        "not-a-token",
        "custom",
        &with("count", (-1).into()),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(listed(&sandgate).await, []);
}

async fn the_installer_file_is_reread_when_it_changes(backend: Backend) {
    let file = installer_file(V1_CURRENT);
    let sandgate = start(&backend, Some(&file), &[]).await;
    assert_eq!(
        listed(&sandgate).await,
        [entry("v1_current", "file", V1_CURRENT, 2)]
    );
    // An upgrade rewrites the file: the next read serves it, no restart.
    write_installer(file.path(), "ghcr.io/openhands/runtime:2.0");
    assert_eq!(
        listed(&sandgate).await,
        [entry(
            "v1_current",
            "file",
            "ghcr.io/openhands/runtime:2.0",
            2
        )]
    );
    // A broken file keeps the last good one in effect.
    std::fs::write(file.path(), "{\"configs\": [").expect("write");
    assert_eq!(
        listed(&sandgate).await,
        [entry(
            "v1_current",
            "file",
            "ghcr.io/openhands/runtime:2.0",
            2
        )]
    );
}

async fn the_list_carries_an_etag_that_changes_with_it(backend: Backend) {
    let file = installer_file(V1_CURRENT);
    let sandgate = start(
        &backend,
        Some(&file),
        &["--warm-runtime-config-overlay", "1"],
    )
    .await;
    let get = |etag: Option<&str>, key: &str| {
        let mut request = sandgate
            .client
            .get(sandgate.url("/api/warm-runtime-configs"))
            .header("x-api-key", key);
        if let Some(etag) = etag {
            request = request.header("if-none-match", etag);
        }
        request.send()
    };
    let first = get(None, RUNTIME_KEY).await.expect("request");
    assert_eq!(first.status(), 200);
    let etag = first.headers()["etag"].to_str().expect("etag").to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    let unchanged = get(Some(&etag), RUNTIME_KEY).await.expect("request");
    assert_eq!(unchanged.status(), StatusCode::NOT_MODIFIED);
    // The tag never stands in for the key.
    let refused = get(Some(&etag), "wrong key").await.expect("request");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);

    let token = login(&sandgate).await;
    let (status, _) = put(&sandgate, &token, "custom", &derived("img:custom")).await;
    assert_eq!(status, 200);
    let changed = get(Some(&etag), RUNTIME_KEY).await.expect("request");
    assert_eq!(changed.status(), 200);
    assert_ne!(changed.headers()["etag"].to_str().expect("etag"), etag);
    let (_, body) = json_of(changed).await;
    assert_eq!(body["configs"].as_array().expect("configs").len(), 2);
}

#[test]
fn an_unreadable_installer_file_stops_the_start() {
    let missing = PathBuf::from("/nonexistent/warm-runtimes.json");
    let err = InstallerFile::open(Some(missing)).err().expect("refused");
    assert!(err.contains("/nonexistent/warm-runtimes.json"), "{err}");
}

crate::on_both_backends!(
    the_list_carries_an_etag_that_changes_with_it,
    saving_takes_pool_management_over_from_the_installer,
    overlay_mode_merges_saved_over_installer_entries,
    saved_configurations_are_checked_field_by_field,
    the_installer_file_is_reread_when_it_changes,
);
