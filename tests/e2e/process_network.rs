//! The `process` driver's network (issue 50) from the hostile side, inside real
//! sandboxes on the real `sandgate` binary, as root and as another user: a sandbox reaches Sandgate's webhooks
//! and gateway and the webhook its start names, and nothing else of this machine: not
//! Sandgate's Redis, not a service on its loopback or on all its addresses, not another
//! sandbox's agent-server, not the metadata address, not Sandgate's `/metrics`; and its
//! network comes back with a resume and goes with a pause.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{RedisServer, SandgateProcess, require_root};
use crate::process_sandboxes::{
    SANDGATE_SECRET, act, call, serve_args, serve_as, serving, until_session,
};
use crate::process_view::{UNPRIVILEGED, closed_data_dir};

/// What the prober tries, from inside its sandbox: each `(host, port)` of `TARGETS`
/// connected to (`connected`, or the error's name), each URL of `URLS` fetched (its
/// status, or the error), and a DNS query (the root's name servers) to the name server of
/// its `/etc/resolv.conf` (`dns`: `answered`, or the error), into `network.json`; then it
/// serves on its port.
const PROBER: &str = r#"
import errno, json, os, socket, urllib.error, urllib.request
seen = {}
def named(e):
    return errno.errorcode.get(e.errno, type(e).__name__) if e.errno else type(e).__name__
try:
    with open("/etc/resolv.conf") as conf:
        server = next(line.split()[1] for line in conf if line.startswith("nameserver"))
    query = os.urandom(2) + bytes.fromhex("01000001000000000000" + "00" + "00020001")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.sendto(query, (server, 53))
    seen["dns"] = "answered" if s.recv(4096)[:2] == query[:2] else "another answer"
except OSError as e:
    seen["dns"] = named(e)
except StopIteration:
    seen["dns"] = "no nameserver"
for name, (host, port) in json.loads(os.environ["TARGETS"]).items():
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        seen[name] = "connected"
    except OSError as e:
        seen[name] = named(e)
    finally:
        s.close()
for name, url in json.loads(os.environ["URLS"]).items():
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            seen[name] = answer.status
    except urllib.error.HTTPError as e:
        seen[name] = e.code
    except Exception as e:
        seen[name] = type(e).__name__
with open("network.json.part", "w") as out:
    json.dump(seen, out)
os.rename("network.json.part", "network.json")
"#;

/// A listener on `address` that answers every connection `200 OK`, counting them.
async fn counting(address: &str) -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind(address).await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = vec![0_u8; 8192];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (port, count)
}

/// A sandbox that runs [`PROBER`] against `targets` and `urls`, then serves on its port;
/// `environment` beside.
fn prober(
    session: &str,
    targets: &Value,
    urls: &Value,
    environment: &BTreeMap<&str, String>,
) -> Value {
    let mut body = json!({
        "image": "local/prober",
        "command": serving("/usr/bin/python3 -c \"$PROBER\";"),
        "working_dir": "/workspace",
        "environment": {"PROBER": PROBER, "TARGETS": targets.to_string(), "URLS": urls.to_string()},
        "session_id": session,
    });
    for (name, value) in environment {
        body["environment"][*name] = json!(value);
    }
    body
}

/// Starts `body` and waits until it runs; its runtime id.
async fn running(sandgate: &SandgateProcess, body: Value) -> String {
    let session = body["session_id"].as_str().expect("session").to_owned();
    let (status, started) = call(sandgate, "/start", Some(body)).await;
    assert_eq!(status, 200, "{started}\n{}", sandgate.log());
    until_session(sandgate, &session, "running").await;
    started["runtime_id"].as_str().expect("id").to_owned()
}

/// The text of `file`, once a sandbox has written it (each writes it whole, by a rename),
/// waiting at most `within`.
pub(crate) async fn written(file: &Path, within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The prober's findings, once written.
async fn findings(data: &Path, runtime_id: &str) -> Value {
    let file = data
        .join("sandboxes")
        .join(runtime_id)
        .join("workspace/network.json");
    serde_json::from_str(&written(&file, Duration::from_secs(60)).await).expect("json")
}

pub(crate) fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|port| port.trim_end_matches('/').parse().ok())
        .expect("port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_reaches_sandgate_and_its_webhook_and_nothing_else_of_this_machine() {
    if !require_root("process sandboxes' network namespaces (root makes them)") {
        return;
    }
    reaches_only_what_it_may(None).await;
}

/// As above, under a Sandgate that is not root, its data directory in a parent of mode
/// 0700: the network comes from a stage in a user namespace of its own (`view.rs`), and
/// pasta opens `/dev/net/tun` as Sandgate's user (`scripts/test` makes it 0666, as
/// Debian's udev does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_root_a_sandbox_reaches_sandgate_and_its_webhook_and_nothing_else() {
    if !require_root("a Sandgate run as another user (root starts it)") {
        return;
    }
    let tun = std::fs::metadata("/dev/net/tun").expect("/dev/net/tun");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&tun.permissions()) & 0o666,
        0o666,
        "/dev/net/tun must be open to every user, as Debian's udev makes it (scripts/test does)"
    );
    reaches_only_what_it_may(Some(UNPRIVILEGED)).await;
}

/// A prober and a neighbour under a Sandgate run as `uid` (root without one).
async fn reaches_only_what_it_may(uid: Option<u32>) {
    let redis = RedisServer::start().await;
    let (_parent, data) = closed_data_dir(uid);
    let data = data.as_path();
    let redis_url = redis.url();
    let mut sandgate = serve_as(uid, data, "8000", &["--redis", &redis_url]).await;
    assert!(
        !sandgate.log().contains("no network of its own"),
        "{}",
        sandgate.log()
    );
    let edge = port_of(&sandgate.url(""));
    // A service on this machine's loopback, one on all its addresses, a webhook target.
    let (canary, canary_seen) = counting("127.0.0.1:0").await;
    let (everywhere, everywhere_seen) = counting("0.0.0.0:0").await;
    let (webhook, webhook_seen) = counting("127.0.0.1:0").await;
    // A neighbour, whose agent-server port is on this machine's loopback.
    let neighbour = running(
        &sandgate,
        json!({
            "image": "local/plain",
            "command": serving(""),
            "working_dir": "/workspace",
            "session_id": "neighbour",
        }),
    )
    .await;
    let (_, neighbour_record) = call(&sandgate, "/sessions/neighbour", None).await;
    let neighbour_port = port_of(neighbour_record["url"].as_str().expect("url"));
    assert!(
        reqwest::get(format!("http://127.0.0.1:{neighbour_port}/"))
            .await
            .is_ok_and(|answer| answer.status() == 200),
        "Sandgate reaches the neighbour's agent-server"
    );
    let redis_port = port_of(&redis_url);
    let targets = json!({
        "redis": ["127.0.0.1", redis_port],
        "canary": ["127.0.0.1", canary],
        "everywhere": ["127.0.0.1", everywhere],
        "neighbour": ["127.0.0.1", neighbour_port],
        "metadata": ["169.254.169.254", 80],
        "private": ["10.0.0.1", 80],
    });
    let urls = json!({
        "health": format!("http://127.0.0.1:{edge}/health"),
        "gateway": format!("http://127.0.0.1:{edge}/v1/models"),
        "metrics": format!("http://127.0.0.1:{edge}/metrics"),
        "webhook": format!("http://127.0.0.1:{webhook}/api/v1/webhooks"),
    });
    let environment = BTreeMap::from([(
        "OH_WEBHOOKS_0_BASE_URL",
        format!("http://127.0.0.1:{webhook}/api/v1/webhooks"),
    )]);
    let id = running(&sandgate, prober("prober", &targets, &urls, &environment)).await;
    let seen = findings(data, &id).await;
    let log = sandgate.log();
    // Sandgate's webhooks and gateway answer (the gateway asks for a key), and the
    // webhook target the start names.
    assert_eq!(seen["health"], 200, "{seen}\n{log}");
    assert_eq!(seen["gateway"], 401, "{seen}");
    assert_eq!(seen["webhook"], 200, "{seen}");
    assert_eq!(webhook_seen.load(Ordering::SeqCst), 1);
    // Not `/metrics`: the sandboxes' listener has none.
    assert_eq!(seen["metrics"], 404, "{seen}");
    // Its own loopback holds none of this machine's services, nor the neighbour's.
    for name in ["redis", "canary", "everywhere", "neighbour"] {
        assert_eq!(seen[name], "ECONNREFUSED", "{name}: {seen}");
    }
    assert_eq!(canary_seen.load(Ordering::SeqCst), 0);
    assert_eq!(everywhere_seen.load(Ordering::SeqCst), 0);
    // The special-purpose blocks are refused by the namespace's rules.
    for name in ["metadata", "private"] {
        assert_eq!(seen[name], "EACCES", "{name}: {seen}");
    }

    // A pause ends its network; a resume brings it back. As root, its namespace has a
    // name; without root, none: it lives as long as the sandbox's processes.
    let namespace = Path::new("/run/netns").join(format!("sandgate-{id}"));
    assert_eq!(namespace.exists(), uid.is_none(), "{}", namespace.display());
    let pasta = data.join("sandbox-state").join(&id).join("pasta.pid");
    let pasta_pid = std::fs::read_to_string(&pasta).expect("pasta's pid");
    let alive = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{}/status", pid.trim()))
            .is_ok_and(|status| !status.lines().any(|line| line.starts_with("State:\tZ")))
    };
    assert!(alive(&pasta_pid), "pasta runs while the sandbox does");
    assert_eq!(act(&sandgate, "pause", &id).await, 200);
    until_session(&sandgate, "prober", "paused").await;
    assert!(
        !namespace.exists(),
        "the paused sandbox's namespace is gone"
    );
    assert!(!pasta.exists(), "its pasta's pid is gone");
    assert!(!alive(&pasta_pid), "its pasta is gone");
    std::fs::remove_file(
        data.join("sandboxes")
            .join(&id)
            .join("workspace/network.json"),
    )
    .expect("rm");
    assert_eq!(act(&sandgate, "resume", &id).await, 200);
    until_session(&sandgate, "prober", "running").await;
    let again = findings(data, &id).await;
    assert_eq!(again["health"], 200, "{again}");
    assert_eq!(again["webhook"], 200, "{again}");
    assert_eq!(again["canary"], "ECONNREFUSED", "{again}");
    assert_eq!(again["metadata"], "EACCES", "{again}");

    // Nothing of either sandbox's network outlives it.
    let pasta_pid = std::fs::read_to_string(&pasta).expect("pasta's pid");
    for runtime_id in [&id, &neighbour] {
        assert_eq!(act(&sandgate, "stop", runtime_id).await, 200);
        let namespace = Path::new("/run/netns").join(format!("sandgate-{runtime_id}"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while namespace.exists() {
            assert!(tokio::time::Instant::now() < deadline, "{namespace:?} left");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while alive(&pasta_pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pasta outlived its sandbox"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sandgate.terminate().await;
}

/// Whether the first name server of this machine's `/etc/resolv.conf` answers a query for
/// the root's name servers.
fn host_resolver_answers() -> bool {
    let conf = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let Some(server) = conf
        .lines()
        .find_map(|line| line.strip_prefix("nameserver"))
        .and_then(|rest| rest.trim().parse::<std::net::IpAddr>().ok())
    else {
        return false;
    };
    let socket = std::net::UdpSocket::bind(if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .expect("socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let query = [
        0x53, 0x47, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
        0x00, 0x01,
    ];
    let mut reply = [0_u8; 4096];
    socket.send_to(&query, (server, 53)).is_ok()
        && socket
            .recv(&mut reply)
            .is_ok_and(|read| read >= 2 && reply[..2] == query[..2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_egress_a_sandbox_reaches_only_what_is_forwarded() {
    if !require_root("process sandboxes' network namespaces (root makes them)") {
        return;
    }
    let targets = json!({"internet": ["1.1.1.1", 80]});
    // The control: this machine's resolver answers the query the prober sends (on this
    // kind of machine it sits at a private address, which no sandbox may reach itself).
    assert!(
        host_resolver_answers(),
        "this machine's resolver does not answer: the test needs one"
    );
    for (egress, internet) in [("internet", false), ("none", true)] {
        let data = tempfile::tempdir().expect("data");
        let mut sandgate = serve_as(None, data.path(), "8000", &["--sandbox-egress", egress]).await;
        let edge = port_of(&sandgate.url(""));
        let urls = json!({"health": format!("http://127.0.0.1:{edge}/health")});
        let id = running(
            &sandgate,
            prober("egress", &targets, &urls, &BTreeMap::new()),
        )
        .await;
        let seen = findings(data.path(), &id).await;
        assert_eq!(seen["health"], 200, "{egress}: {seen}");
        assert_eq!(seen["internet"] == "EACCES", internet, "{egress}: {seen}");
        // With egress, a route out: the machine's gateway sits in a private block, which
        // the rules refuse, and pasta's default route through it was refused with it
        // (whether the internet answers is this machine's business, not the test's).
        if !internet {
            assert_ne!(seen["internet"], "ENETUNREACH", "{egress}: {seen}");
        }
        // Names through pasta with egress; none without (DNS carries data out).
        assert_eq!(seen["dns"] == "answered", !internet, "{egress}: {seen}");
        sandgate.terminate().await;
    }
}

/// A machine whose `/etc/resolv.conf` is a link, as systemd-resolved makes it (to
/// `../run/systemd/resolve/stub-resolv.conf`): Sandgate runs in a mount namespace of its
/// own whose `/etc` is this machine's with that link in place of the file. A sandbox
/// with egress still starts, and asks its names of pasta. (bwrap cannot bind a file onto
/// a link whose target the sandbox's view lacks: every such start failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_resolv_conf_still_gives_a_sandbox_names() {
    if !require_root("process sandboxes' network namespaces (root makes them)") {
        return;
    }
    assert!(
        host_resolver_answers(),
        "this machine's resolver does not answer: the test needs one"
    );
    // The link's target on this machine's /run, with this machine's resolver in it.
    let run = tempfile::Builder::new()
        .prefix("sandgate-resolve-")
        .tempdir_in("/run")
        .expect("a folder on /run");
    std::fs::copy("/etc/resolv.conf", run.path().join("stub-resolv.conf")).expect("copy");
    // /etc as this machine has it, its resolv.conf the link.
    let etc = tempfile::tempdir().expect("etc");
    let copied = std::process::Command::new("cp")
        .args(["-a", "/etc/."])
        .arg(etc.path())
        .status()
        .expect("cp");
    assert!(copied.success());
    let conf = etc.path().join("resolv.conf");
    std::fs::remove_file(&conf).expect("remove");
    let target = format!("..{}/stub-resolv.conf", run.path().display());
    std::os::unix::fs::symlink(&target, &conf).expect("link");
    let data = tempfile::tempdir().expect("data");
    let etc_path = etc.path().display().to_string();
    let wrapper = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        "mount --bind \"$0\" /etc && exec \"$@\"",
        &etc_path,
    ];
    let mut sandgate = SandgateProcess::spawn_wrapped(
        &wrapper,
        &serve_args(data.path(), "8000", &["--sandbox-egress", "internet"]),
        &[("JWT_SECRET", SANDGATE_SECRET)],
    )
    .await;
    let edge = port_of(&sandgate.url(""));
    let urls = json!({"health": format!("http://127.0.0.1:{edge}/health")});
    let id = running(
        &sandgate,
        prober("linked", &json!({}), &urls, &BTreeMap::new()),
    )
    .await;
    let seen = findings(data.path(), &id).await;
    assert_eq!(seen["health"], 200, "{seen}");
    assert_eq!(seen["dns"], "answered", "{seen}");
    sandgate.terminate().await;
}
