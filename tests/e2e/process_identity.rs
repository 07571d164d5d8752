//! A process sandbox is its own agent-server, not whatever listens on its port (issue 50,
//! point 4), from the hostile side on the real `sandgate` binary, as root and as an
//! unprivileged user: a thief sandbox listening on a paused sandbox's port (which it can
//! where sandboxes share the machine's loopback, as under an unprivileged Sandgate on a
//! machine whose `/dev/net/tun` is root's alone) answers everything, and still the resumed sandbox is not ready through it; once the
//! thief is gone, the sandbox's own server, holding the key its resume rotated, is.

use serde_json::{Value, json};

use crate::common::require_root;
use crate::process_sandboxes::{act, call, serve_as, serving, until_session};
use crate::process_view::{UNPRIVILEGED, closed_data_dir, is_root, unprivileged_network};

/// How many times the victim is looked at (each look asks its port again) while the thief
/// holds it: before the fix the first look said `running`.
const LOOKS: usize = 20;

/// Its agent-server serves only once its workspace holds `go`: the test decides when its
/// port is taken by its own server.
fn victim(session: &str) -> Value {
    json!({
        "image": "local/victim",
        "command": serving("until [ -e go ]; do sleep 0.05; done;"),
        "working_dir": "/workspace",
        "session_id": session,
    })
}

/// What the thief listens with on the victim's port: `200` to every request, whatever
/// its path and key, each key it is sent written down (`keys.txt`).
const THIEF: &str = r#"
import http.server, os
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open("keys.txt", "a") as seen:
            seen.write("%s %s\n" % (self.headers.get("X-Session-API-Key"), self.headers.get("X-Init-API-Key")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["VICTIM_PORT"])), Handler).serve_forever()
"#;

/// Serves on its own port as a sandbox does, and runs [`THIEF`] on the victim's.
fn thief(session: &str, victim_port: u16) -> Value {
    json!({
        "image": "local/thief",
        "command": serving("/usr/bin/python3 -c \"$THIEF\" & "),
        "working_dir": "/workspace",
        "environment": {"THIEF": THIEF, "VICTIM_PORT": victim_port.to_string()},
        "session_id": session,
    })
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|port| port.trim_end_matches('/').parse().ok())
        .expect("port")
}

async fn answers_everything(port: u16) -> bool {
    reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/api/conversations/count"))
        .header("X-Session-API-Key", "anything")
        .send()
        .await
        .is_ok_and(|answer| answer.status() == 200)
}

/// Whether sandboxes of a Sandgate run as `uid` (`None`: as the tests) share the
/// machine's loopback: without root, they have no network of their own unless pasta may
/// open `/dev/net/tun` as that user (`scripts/test` makes it so, as Debian's udev does;
/// where it is not, this test tries the loopback they share).
fn shares_loopback(uid: Option<u32>) -> bool {
    !is_root() || (uid.is_some() && !unprivileged_network())
}

async fn a_thief_never_answers_for_a_paused_sandbox(uid: Option<u32>) {
    let (_parent, data) = closed_data_dir(uid);
    let mut sandgate = serve_as(uid, &data, "8000", &[]).await;
    let name = |role: &str| format!("{role}-{}", uid.unwrap_or(0));
    let (victim_session, thief_session) = (name("victim"), name("thief"));
    let (status, started) = call(&sandgate, "/start", Some(victim(&victim_session))).await;
    assert_eq!(status, 200, "{started}");
    let id = started["runtime_id"].as_str().expect("id").to_owned();
    let go = data.join("sandboxes").join(&id).join("workspace/go");
    std::fs::write(&go, "").expect("go");
    let running = until_session(&sandgate, &victim_session, "running").await;
    let port = port_of(running["url"].as_str().expect("url"));

    assert_eq!(act(&sandgate, "pause", &id).await, 200);
    until_session(&sandgate, &victim_session, "paused").await;
    std::fs::remove_file(&go).expect("no go");
    let (status, answer) = call(&sandgate, "/start", Some(thief(&thief_session, port))).await;
    assert_eq!(status, 200, "{answer}");
    until_session(&sandgate, &thief_session, "running").await;
    let thief_id = answer["runtime_id"].as_str().expect("id").to_owned();
    if shares_loopback(uid) {
        // Sharing the machine's loopback, the thief holds the victim's port: the control
        // that the looks below are made against a listener answering everything.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while !answers_everything(port).await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the thief never took the port\n{}",
                sandgate.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    } else {
        // In a network of its own, its listener is on its own loopback, not the machine's.
        assert!(
            !answers_everything(port).await,
            "the thief reached the machine's loopback"
        );
    }

    assert_eq!(act(&sandgate, "resume", &id).await, 200);
    let mut key = String::new();
    for look in 0..LOOKS {
        let (_, seen) = call(&sandgate, &format!("/sessions/{victim_session}"), None).await;
        assert_ne!(
            seen["status"], "running",
            "look {look}: the thief's listener made the victim ready: {seen}"
        );
        key = seen["session_api_key"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    }
    // Nor was it handed the keys the resume gave the victim, which would open the
    // victim's agent-server to it once it is up.
    assert!(!key.is_empty());
    let handed = std::fs::read_to_string(
        data.join("sandboxes")
            .join(&thief_id)
            .join("workspace/keys.txt"),
    )
    .unwrap_or_default();
    assert!(
        !handed.contains(&key),
        "the thief was sent the victim's key"
    );

    // The thief goes; the victim's own server, with the resume's key, makes it ready.
    assert_eq!(act(&sandgate, "stop", &thief_id).await, 200);
    std::fs::write(&go, "").expect("go");
    let running = until_session(&sandgate, &victim_session, "running").await;
    assert_eq!(port_of(running["url"].as_str().expect("url")), port);
    let key = running["session_api_key"].as_str().expect("key");
    let own = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/api/conversations/count"))
        .header("X-Session-API-Key", key)
        .send()
        .await
        .expect("its own server")
        .status();
    assert_eq!(own, 200);
    sandgate.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thief_on_a_paused_sandbox_s_port_never_answers_for_it() {
    a_thief_never_answers_for_a_paused_sandbox(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thief_on_a_paused_sandbox_s_port_never_answers_for_it_under_an_unprivileged_sandgate() {
    if require_root("an unprivileged Sandgate's sandboxes (root runs it as another uid)") {
        a_thief_never_answers_for_a_paused_sandbox(Some(UNPRIVILEGED)).await;
    }
}
