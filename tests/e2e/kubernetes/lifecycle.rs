//! A sandbox's life on the cluster after its start: pause and resume (a new key, the
//! original image), delete, a half-made sandbox removed, and a sandbox an older release
//! made resumed with its key moved into a Secret.

use axum::http::Method;
use sandgate_runtime_api::sandboxes::driver::SandboxDriver;
use serde_json::json;

use crate::common::fake_kube::{CLAIMS, DEPLOYMENTS, INGRESSES, SECRETS, SERVICES};

use super::*;

#[tokio::test]
async fn pause_keeps_the_claim_and_resume_restarts_on_the_original_image_with_a_new_key() {
    let (fake, driver) = start().await;
    let record = sandbox("9a05e", Some("v1_current"));
    driver.create(&record, &keys(KEY)).await.expect("create");

    driver.pause(&record).await.expect("pause");
    let paused = object(&fake, DEPLOYMENTS, "sandbox-9a05e");
    assert_eq!(paused["spec"]["replicas"], 0);
    assert!(
        fake.object(CLAIMS, NAMESPACE, "sandbox-9a05e-workspace")
            .is_some()
    );
    let pause = fake.requests().pop().expect("the pause request");
    assert_eq!(pause.method, Method::PATCH);
    assert_eq!(
        pause.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(pause.body, Some(json!({"spec": {"replicas": 0}})));

    // The record a later start would carry may name another image: the workload keeps its own.
    let mut resumed_record = record.clone();
    resumed_record.spec.image = "ghcr.io/acme/agent-server:2.0.0".into();
    driver
        .resume(&resumed_record, &keys("session-key-of-the-second-run"))
        .await
        .expect("resume");
    let resumed = object(&fake, DEPLOYMENTS, "sandbox-9a05e");
    assert_eq!(resumed["spec"]["replicas"], 1);
    let containers = resumed["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "{containers:?}");
    let container = &containers[0];
    assert_eq!(container["image"], "ghcr.io/acme/agent-server:1.4.2");
    // The new key is in the Secret; the pod template names the key's version, so the
    // Deployment starts a new pod, which reads it.
    let secret = object(&fake, SECRETS, "sandbox-9a05e-session");
    assert_eq!(
        secret["stringData"],
        json!({"SESSION_API_KEY": "session-key-of-the-second-run", "OH_SECRET_KEY": SECRET_KEY}),
        "a new session key beside the secret key the sandbox keeps for life"
    );
    assert_eq!(
        resumed["spec"]["template"]["metadata"]["annotations"]["sandgate.dev/session-key-version"],
        resumed_record.key_nonce.as_str()
    );
    assert!(!resumed.to_string().contains("session-key-of"), "{resumed}");
    let key_entry = env_entry(container, "SESSION_API_KEY");
    assert_eq!(key_entry, &key_from_secret("9a05e"));
    assert_eq!(
        env_entry(container, "OH_SECRET_KEY"),
        &entry_from_secret("9a05e", "OH_SECRET_KEY")
    );
    assert_eq!(env_value(container, "LOG_LEVEL"), Some("debug"));
    assert_eq!(container["env"].as_array().expect("env").len(), 4);
    assert!(
        fake.object(CLAIMS, NAMESPACE, "sandbox-9a05e-workspace")
            .is_some()
    );
    let requests = fake.requests();
    let secret_patch = &requests[requests.len() - 2];
    assert_eq!(secret_patch.method, Method::PATCH);
    assert!(
        secret_patch
            .path
            .ends_with("/secrets/sandbox-9a05e-session")
    );
    let resume = requests.last().expect("the resume request").clone();
    assert_eq!(resume.method, Method::PATCH);
    assert_eq!(
        resume.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    let body = resume.body.expect("a patch body").to_string();
    assert!(!body.contains("image"), "{body}");
}

#[tokio::test]
async fn delete_removes_that_sandboxs_objects_and_leaves_the_others() {
    let (fake, driver) = start().await;
    let doomed = sandbox("dead01", Some("v1_current"));
    let kept = sandbox("a11ve", Some("v1_current"));
    driver
        .create(&doomed, &keys(KEY))
        .await
        .expect("create doomed");
    driver
        .create(&kept, &keys("other-key"))
        .await
        .expect("create kept");

    driver.delete(&doomed.runtime_id).await.expect("delete");
    for (resource, found) in objects_of(&fake, "dead01") {
        assert!(found.is_none(), "{resource} of the deleted sandbox is left");
    }
    for (resource, found) in objects_of(&fake, "a11ve") {
        assert!(found.is_some(), "{resource} of the other sandbox is gone");
    }
    let deletes: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|request| request.method == Method::DELETE)
        .collect();
    assert_eq!(deletes.len(), 5, "{deletes:?}");
    for request in &deletes {
        assert!(
            request.path.ends_with("/sandbox-dead01")
                || request.path.ends_with("/sandbox-dead01-workspace")
                || request.path.ends_with("/sandbox-dead01-session"),
            "{request:?}"
        );
        // Dependents (the ReplicaSet, the pod) are deleted too, not orphaned.
        assert_eq!(
            request.body.as_ref().map(|body| &body["propagationPolicy"]),
            Some(&json!("Background"))
        );
    }

    // Deleting what is gone already is not an error.
    driver
        .delete(&doomed.runtime_id)
        .await
        .expect("delete again");
}

#[tokio::test]
async fn a_half_made_sandbox_is_removed_and_errors_name_the_object() {
    let (fake, driver) = start().await;
    let record = sandbox("p4r71a1", Some("v1_current"));
    fake.fail_next(
        Method::POST,
        INGRESSES,
        422,
        "Invalid",
        "Ingress.networking.k8s.io \"sandbox-p4r71a1\" is invalid: spec.rules[0].host: Invalid value",
    );

    let err = driver
        .create(&record, &keys(KEY))
        .await
        .expect_err("the ingress is refused");
    let message = err.to_string();
    assert!(
        message.contains("Ingress sandboxes/sandbox-p4r71a1"),
        "{message}"
    );
    assert!(message.contains("Invalid (422)"), "{message}");
    assert!(
        message.contains("the half-made sandbox was removed"),
        "{message}"
    );
    assert!(!message.contains(KEY), "{message}");
    // Nothing is left to wait for a retry that may never come.
    for (resource, found) in objects_of(&fake, "p4r71a1") {
        assert!(
            found.is_none(),
            "{resource} of the half-made sandbox is left"
        );
    }

    // The cleanup fails too (etcd is electing a leader): the error says the sweep retries,
    // and a retry of the create finds the Deployment in place (409), reads its uid and
    // makes the rest.
    fake.fail_next(
        Method::POST,
        SERVICES,
        500,
        "InternalError",
        "etcdserver: request timed out",
    );
    fake.fail_next(
        Method::DELETE,
        DEPLOYMENTS,
        500,
        "InternalError",
        "etcdserver: leader changed",
    );
    let message = driver
        .create(&record, &keys(KEY))
        .await
        .expect_err("the service fails")
        .to_string();
    assert!(message.contains("InternalError (500)"), "{message}");
    assert!(message.contains("the orphan sweep retries"), "{message}");
    assert!(
        fake.object(DEPLOYMENTS, NAMESPACE, "sandbox-p4r71a1")
            .is_some()
    );
    driver.create(&record, &keys(KEY)).await.expect("retry");
    for (resource, found) in objects_of(&fake, "p4r71a1") {
        let found = found.unwrap_or_else(|| panic!("{resource} missing after the retry"));
        if resource != DEPLOYMENTS {
            assert_eq!(
                found["metadata"]["ownerReferences"],
                owner(&fake, "p4r71a1")
            );
        }
    }
    driver
        .create(&record, &keys(KEY))
        .await
        .expect("a third create");
    assert_eq!(fake.names(DEPLOYMENTS, NAMESPACE), ["sandbox-p4r71a1"]);

    // A sandbox the cluster lost: the error names the object and the API's reason.
    let err = driver
        .pause(&sandbox("l057", None))
        .await
        .expect_err("nothing to pause");
    assert_eq!(
        err.to_string(),
        "cannot patch Deployment sandboxes/sandbox-l057: NotFound (404): deployments.apps \"sandbox-l057\" not found"
    );
}

#[tokio::test]
async fn resuming_a_sandbox_an_older_release_made_moves_its_key_into_a_secret() {
    let (fake, driver) = start().await;
    let record = sandbox("01d", None);
    driver.create(&record, &keys(KEY)).await.expect("create");
    // As an older release left it: the key in clear in the pod template, no secret key,
    // no Secret.
    let mut deployment = object(&fake, DEPLOYMENTS, "sandbox-01d");
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .expect("env");
    env.retain(|entry| entry["name"] != "OH_SECRET_KEY");
    for entry in env {
        if entry["name"] == "SESSION_API_KEY" {
            *entry = json!({"name": "SESSION_API_KEY", "value": KEY});
        }
    }
    fake.put(DEPLOYMENTS, deployment);
    fake.remove(SECRETS, NAMESPACE, "sandbox-01d-session");

    driver
        .resume(&record, &keys("the-new-key"))
        .await
        .expect("resume");
    let secret = object(&fake, SECRETS, "sandbox-01d-session");
    assert_eq!(
        secret["stringData"],
        json!({"SESSION_API_KEY": "the-new-key", "OH_SECRET_KEY": SECRET_KEY})
    );
    assert_eq!(secret["metadata"]["ownerReferences"], owner(&fake, "01d"));
    let resumed = object(&fake, DEPLOYMENTS, "sandbox-01d");
    assert!(!resumed.to_string().contains(KEY), "{resumed}");
    let container = &resumed["spec"]["template"]["spec"]["containers"][0];
    let key_entry = env_entry(container, "SESSION_API_KEY");
    assert_eq!(key_entry, &key_from_secret("01d"));
    // (Added by the patch, with the `"value": null` that removes a value where there is one.)
    assert_eq!(
        env_entry(container, "OH_SECRET_KEY")["valueFrom"],
        entry_from_secret("01d", "OH_SECRET_KEY")["valueFrom"],
        "a sandbox made before secret keys gets one at its resume"
    );
    never_read_a_secret(&fake);
}
