//! The objects a sandbox is made of: the Deployment, Service, Ingress, claim and Secret,
//! their labels and resources, what each Pod Security level refuses and allows, a FUSE S3
//! sandbox, and every object sent valid against the Kubernetes schemas and the restricted
//! standard.

use axum::http::Method;
use sandgate_runtime_api::sandboxes::driver::{Refusal, SandboxDriver};
use sandgate_runtime_api::sandboxes::kubernetes::PodSecurity;
use serde_json::{Value, json};

use crate::common::fake_kube::{CLAIMS, DEPLOYMENTS, INGRESSES, SECRETS, SERVICES};
use crate::common::{driver_output, repository, tool};

use super::*;

#[tokio::test]
async fn create_makes_the_deployment_service_ingress_and_claim() {
    let (fake, driver) = start().await;
    let mut record = sandbox("a1b2c3", Some("v1_current"));
    // A session key list of the spec's own would shut the sandbox's key out: dropped.
    record
        .spec
        .environment
        .insert("OH_SESSION_API_KEYS_0".into(), "the-spec-s-own-key".into());
    driver.create(&record, &keys(KEY)).await.expect("create");

    let deployment = object(&fake, DEPLOYMENTS, "sandbox-a1b2c3");
    assert_labels(&deployment, "a1b2c3", "v1_current");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["strategy"]["type"], "Recreate");
    assert_eq!(spec["revisionHistoryLimit"], 1);
    assert_eq!(
        spec["selector"]["matchLabels"]["sandgate.dev/runtime-id"],
        "a1b2c3"
    );
    assert_labels(&spec["template"], "a1b2c3", "v1_current");
    let pod = &spec["template"]["spec"];
    assert_eq!(
        pod["securityContext"],
        json!({"runAsUser": 1000, "runAsGroup": 1001, "fsGroup": 1002, "runAsNonRoot": true,
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "ghcr.io/acme/agent-server:1.4.2");
    assert_eq!(
        container["command"],
        json!(["/usr/local/bin/agent-server", "--port=8000"])
    );
    assert_eq!(container["workingDir"], "/workspace");
    assert_eq!(
        container["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
    );
    // The key reaches the pod from the sandbox's Secret, never in clear in the Deployment
    // (nor so in its ReplicaSets and pods, which the `view` role reads).
    let key_entry = env_entry(container, "SESSION_API_KEY");
    assert_eq!(key_entry, &key_from_secret("a1b2c3"));
    assert_eq!(
        env_entry(container, "OH_SECRET_KEY"),
        &entry_from_secret("a1b2c3", "OH_SECRET_KEY")
    );
    assert!(!deployment.to_string().contains(SECRET_KEY), "{deployment}");
    assert!(!deployment.to_string().contains(KEY), "{deployment}");
    let secret = object(&fake, SECRETS, "sandbox-a1b2c3-session");
    assert_labels(&secret, "a1b2c3", "v1_current");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(
        secret["stringData"],
        json!({"SESSION_API_KEY": KEY, "OH_SECRET_KEY": SECRET_KEY})
    );
    assert_eq!(env_value(container, "LOG_LEVEL"), Some("debug"));
    assert!(
        !deployment.to_string().contains("OH_SESSION_API_KEYS"),
        "{deployment}"
    );
    assert_eq!(
        env_value(container, "OH_WEBHOOKS_0_BASE_URL"),
        Some("https://app.example.com")
    );
    assert_eq!(container["ports"][0]["containerPort"], 8000);
    let resources = &container["resources"];
    assert_eq!(resources["requests"]["ephemeral-storage"], "25Gi");
    assert_eq!(resources["limits"]["ephemeral-storage"], "25Gi");
    assert_eq!(resources["requests"]["cpu"], "1000m");
    assert_eq!(resources["requests"]["memory"], "2048Mi");
    assert_eq!(resources["limits"]["cpu"], "2000m");
    assert_eq!(resources["limits"]["memory"], "4096Mi");
    assert_eq!(
        pod["volumes"],
        json!([{"name": "workspace",
                "persistentVolumeClaim": {"claimName": "sandbox-a1b2c3-workspace"}}])
    );
    assert_eq!(
        container["volumeMounts"],
        json!([{"name": "workspace", "mountPath": "/workspace"}])
    );
    assert_eq!(pod["automountServiceAccountToken"], false);

    let claim = object(&fake, CLAIMS, "sandbox-a1b2c3-workspace");
    assert_labels(&claim, "a1b2c3", "v1_current");
    assert_eq!(
        claim["spec"],
        json!({"accessModes": ["ReadWriteOnce"], "storageClassName": "fast-ssd",
               "resources": {"requests": {"storage": "10Gi"}}})
    );

    let service = object(&fake, SERVICES, "sandbox-a1b2c3");
    assert_labels(&service, "a1b2c3", "v1_current");
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "http", "port": 80, "targetPort": 8000}])
    );
    assert_eq!(
        service["spec"]["selector"],
        json!({"app.kubernetes.io/managed-by": "sandgate", "sandgate.dev/runtime-id": "a1b2c3"})
    );

    let ingress = object(&fake, INGRESSES, "sandbox-a1b2c3");
    assert_labels(&ingress, "a1b2c3", "v1_current");
    assert_eq!(ingress["spec"]["ingressClassName"], "nginx");
    assert_eq!(
        ingress["spec"]["tls"],
        json!([{"hosts": ["a1b2c3-runtime.example.com"], "secretName": "runtime-wildcard-tls"}])
    );
    assert_eq!(
        ingress["spec"]["rules"],
        json!([{"host": "a1b2c3-runtime.example.com", "http": {"paths": [{
            "path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "sandbox-a1b2c3", "port": {"number": 80}}}
        }]}}])
    );

    // Every object but the Deployment is its dependent: deleting it deletes them.
    let owned_by = owner(&fake, "a1b2c3");
    assert!(owned_by[0]["uid"].is_string(), "{owned_by}");
    for dependent in [&secret, &claim, &service, &ingress] {
        assert_eq!(
            dependent["metadata"]["ownerReferences"], owned_by,
            "{dependent}"
        );
    }
    assert!(deployment["metadata"].get("ownerReferences").is_none());

    // Five creates, each a JSON POST into the sandbox namespace; the Deployment first,
    // whose uid the others name.
    let requests = fake.requests();
    assert_eq!(requests.len(), 5, "{requests:?}");
    assert!(requests[0].path.ends_with("/deployments"), "{requests:?}");
    for request in &requests {
        assert_eq!(request.method, Method::POST);
        assert!(
            request.path.contains("/namespaces/sandboxes/"),
            "{request:?}"
        );
        assert_eq!(request.content_type.as_deref(), Some("application/json"));
    }
}

#[tokio::test]
async fn a_cold_sandbox_is_labelled_cold_and_its_resources_scale_with_its_factor() {
    let (fake, driver) = start().await;
    let mut record = sandbox("c0ffee", None);
    record.spec.resource_factor = Some(2.0);
    record.spec.run_as_user = None;
    record.spec.run_as_group = None;
    record.spec.fs_group = None;
    driver.create(&record, &keys(KEY)).await.expect("create");

    for (resource, found) in objects_of(&fake, "c0ffee") {
        assert_labels(
            &found.unwrap_or_else(|| panic!("{resource}")),
            "c0ffee",
            "cold",
        );
    }
    let deployment = object(&fake, DEPLOYMENTS, "sandbox-c0ffee");
    let pod = &deployment["spec"]["template"]["spec"];
    // No user asked: the image's, which must not be root.
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let resources = &pod["containers"][0]["resources"];
    assert_eq!(resources["requests"]["cpu"], "2000m");
    assert_eq!(resources["requests"]["memory"], "4096Mi");
    assert_eq!(resources["limits"]["cpu"], "4000m");
    assert_eq!(resources["limits"]["memory"], "8192Mi");
    // The scratch disk does not scale: it is the installation's setting.
    assert_eq!(resources["requests"]["ephemeral-storage"], "25Gi");
}

#[tokio::test]
async fn what_the_pod_security_level_refuses_and_allows() {
    let mut root = sandbox("r007", None).spec;
    root.run_as_user = Some(0);
    let mut fuse = sandbox("f05e", None).spec;
    fuse.fuse_s3_mount = Some(true);
    let plain = sandbox("p1a1n", None).spec;

    let (_, restricted) = start_with(PodSecurity::Restricted).await;
    let refusal = restricted.admit(&root).expect_err("root");
    assert_eq!(refusal.field, "run_as_user");
    assert!(
        refusal.message.contains("SANDBOX_POD_SECURITY=baseline"),
        "{refusal:?}"
    );
    let Refusal {
        field,
        input,
        message,
    } = restricted.admit(&fuse).expect_err("fuse");
    assert_eq!(input, json!(true));
    assert_eq!(field, "fuse_s3_mount");
    assert!(
        message.contains("SANDBOX_POD_SECURITY=privileged"),
        "{message}"
    );
    assert_eq!(restricted.admit(&plain), Ok(()));

    let (fake, baseline) = start_with(PodSecurity::Baseline).await;
    assert_eq!(baseline.admit(&root), Ok(()));
    assert_eq!(
        baseline.admit(&fuse).map_err(|refusal| refusal.field),
        Err("fuse_s3_mount")
    );
    let mut record = sandbox("r007", None);
    record.spec = root;
    baseline.create(&record, &keys(KEY)).await.expect("create");
    let pod = object(&fake, DEPLOYMENTS, "sandbox-r007")["spec"]["template"]["spec"].clone();
    assert_eq!(pod["securityContext"]["runAsUser"], 0);
    assert!(
        pod["securityContext"].get("runAsNonRoot").is_none(),
        "{pod}"
    );
    assert_eq!(
        pod["containers"][0]["securityContext"],
        json!({"allowPrivilegeEscalation": false})
    );

    let (_, privileged) = start_with(PodSecurity::Privileged).await;
    assert_eq!(privileged.admit(&fuse), Ok(()));
}

#[tokio::test]
async fn a_fuse_s3_sandbox_runs_privileged_with_an_empty_dir_and_no_claim() {
    let (fake, driver) = start_with(PodSecurity::Privileged).await;
    let mut record = sandbox("f05e", Some("s3"));
    record.spec.fuse_s3_mount = Some(true);
    driver.create(&record, &keys(KEY)).await.expect("create");

    assert!(fake.names(CLAIMS, NAMESPACE).is_empty());
    let deployment = object(&fake, DEPLOYMENTS, "sandbox-f05e");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"],
        json!([{"name": "workspace", "emptyDir": {}}])
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["mountPath"],
        "/workspace"
    );
    // /dev/fuse and CAP_SYS_ADMIN come with a privileged container.
    assert_eq!(
        pod["containers"][0]["securityContext"],
        json!({"privileged": true})
    );
    assert!(fake.object(SERVICES, NAMESPACE, "sandbox-f05e").is_some());
    assert!(fake.object(INGRESSES, NAMESPACE, "sandbox-f05e").is_some());
}

/// Every object the driver sends in the tests' shapes (a warm sandbox with its user, a cold
/// one without, resumed, paused; a FUSE one under `privileged`) validates strictly against
/// the Kubernetes 1.32 and 1.37 schemas, and every pod but the FUSE one meets the
/// restricted Pod Security Standard, rule by rule.
#[tokio::test]
async fn the_objects_sent_validate_strictly_and_meet_the_restricted_standard() {
    let python = tool("k8s-venv/bin/python", "scripts/check-k8s");
    let mut objects = Vec::new();

    let (fake, driver) = start().await;
    let warm = sandbox("a1b2c3", Some("v1_current"));
    let mut cold = sandbox("c0ffee", None);
    cold.spec.run_as_user = None;
    cold.spec.run_as_group = None;
    cold.spec.fs_group = None;
    cold.spec.resource_factor = Some(2.0);
    for record in [&warm, &cold] {
        driver.create(record, &keys(KEY)).await.expect("create");
    }
    driver.pause(&cold).await.expect("pause");
    driver
        .resume(&cold, &keys("a-new-key"))
        .await
        .expect("resume");
    driver.pause(&warm).await.expect("pause");
    driver.delete(&warm.runtime_id).await.expect("delete");
    driver
        .create(&warm, &keys(KEY))
        .await
        .expect("create again");
    never_read_a_secret(&fake);
    objects.extend(fake.all());

    let (fake, driver) = start_with(PodSecurity::Privileged).await;
    let mut fuse = sandbox("f05e", Some("s3"));
    fuse.spec.fuse_s3_mount = Some(true);
    driver.create(&fuse, &keys(KEY)).await.expect("create");
    objects.extend(fake.all());
    let kinds: std::collections::BTreeSet<String> = objects
        .iter()
        .filter_map(|object| object["kind"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "Deployment",
            "Ingress",
            "PersistentVolumeClaim",
            "Secret",
            "Service"
        ]
    );

    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), Value::Array(objects).to_string()).expect("write");
    let mut checker = tokio::process::Command::new(python);
    checker
        .arg(repository("tests/k8s/check_sandbox_objects.py"))
        .arg(file.path())
        .args(["--privileged", "sandbox-f05e"]);
    let report = driver_output(checker, String::new).await;
    assert!(report.contains("0 problems"), "{report}");
}
