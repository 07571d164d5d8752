//! What `gateway_nginx` measures against: a fake provider answering at once, nginx in
//! front of it, and the load of `wrk`.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// Where the provider serves chat completions.
pub const UPSTREAM_PATH: &str = "/v1/chat/completions";

/// Chunks of a streamed answer.
const CHUNKS: usize = 30;

/// The least a whole streamed answer holds: its chunks' events.
pub const STREAM_BYTES: usize = CHUNKS * 100;

/// The prompt, and where a call's number goes in it (a platform's calls differ: the
/// gateway holds at most four calls of one caller with one prompt in flight).
const NUMBER_MARK: &str = "@N@";

fn chat_template(stream: bool) -> String {
    json!({
        "model": "gpt",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": format!("Write a function that adds two numbers (call {NUMBER_MARK}).")}
        ],
        "stream": stream,
        "user": "user-1",
    })
    .to_string()
}

/// A chat completion request, numbered `n`.
pub fn chat_body(stream: bool, n: u64) -> Bytes {
    Bytes::from(chat_template(stream).replacen(NUMBER_MARK, &n.to_string(), 1))
}

/// What the prompt of a streamed request whose events the upstream paces, [`PACE`]
/// apart, says (the prompt reaches the upstream as it was sent).
const PACED_MARK: &str = "(paced)";

/// How far apart a paced stream's events are: a model generating, each event on its own
/// rather than a burst.
const PACE: std::time::Duration = std::time::Duration::from_millis(10);

/// A streamed chat completion request, numbered `n`, whose events the upstream paces.
pub fn paced_chat_body(n: u64) -> Bytes {
    Bytes::from(chat_template(true).replacen(NUMBER_MARK, &format!("{n} {PACED_MARK}"), 1))
}

fn chunk(model: &str, index: usize) -> Bytes {
    let mut event = json!({
        "id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
        "choices": [{"index": 0, "delta": {"content": format!("token {index} of the answer ")}, "finish_reason": null}],
    });
    if index + 1 == CHUNKS {
        event["choices"][0]["finish_reason"] = "stop".into();
        event["usage"] = json!({"prompt_tokens": 11, "completion_tokens": 30, "total_tokens": 41});
    }
    Bytes::from(format!("data: {event}\n\n"))
}

/// A small completion, or a stream of [`CHUNKS`] chunks, each written on its own.
async fn completion(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let paced = request["messages"][1]["content"]
        .as_str()
        .is_some_and(|prompt| prompt.contains(PACED_MARK));
    if request["stream"] == true {
        let chunks = futures::stream::unfold(0, move |index| {
            let model = model.clone();
            async move {
                if index > CHUNKS {
                    return None;
                }
                // Each chunk its own write, as a provider sends tokens as they come: as
                // fast as it can (a burst, when the reader is slower), or paced.
                if paced {
                    tokio::time::sleep(PACE).await;
                } else {
                    tokio::task::yield_now().await;
                }
                let bytes = if index == CHUNKS {
                    Bytes::from_static(b"data: [DONE]\n\n")
                } else {
                    chunk(&model, index)
                };
                Some((Ok::<_, std::convert::Infallible>(bytes), index + 1))
            }
        });
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(chunks))
            .expect("response");
    }
    let reply = json!({
        "id": "c1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(reply.to_string()))
        .expect("response")
}

/// The fake provider, on a runtime of its own (so that the bench's client never slows
/// it), on port 0; its base URL.
pub async fn upstream() -> String {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let address = listener.local_addr().expect("addr");
            sender.send(address).expect("address");
            let app = Router::new().route(UPSTREAM_PATH, post(completion));
            let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
                stream.set_nodelay(true).expect("nodelay");
            });
            axum::serve(listener, app).await.expect("serve");
        });
    });
    format!("http://{}", receiver.await.expect("the provider's address"))
}

/// A gateway configuration with one entry, `gpt`, served by `upstream` at list prices.
pub fn gateway_config(upstream: &str) -> tempfile::NamedTempFile {
    let config = tempfile::NamedTempFile::new().expect("config");
    std::fs::write(
        config.path(),
        format!(
            "model_list:\n  - model_name: gpt\n    gateway_params: {{model: openai/gpt-up, api_base: \"{upstream}/v1\", api_key: sk-upstream}}\n    model_info: {{input_cost_per_token: 0.000003, output_cost_per_token: 0.000015}}\n"
        ),
    )
    .expect("write config");
    config
}

/// A virtual key of `base` for `gpt` with a budget it never reaches.
pub async fn budgeted_key(base: &str, master_key: &str) -> String {
    let generated: Value = reqwest::Client::new()
        .post(format!("{base}/key/generate"))
        .bearer_auth(master_key)
        .json(&json!({"models": ["gpt"], "max_budget": 1e12}))
        .send()
        .await
        .expect("/key/generate")
        .json()
        .await
        .expect("JSON");
    generated["key"].as_str().expect("a key").to_owned()
}

/// A running nginx, stopped when dropped: SIGTERM is nginx's fast shutdown, in which the
/// master stops its workers before it exits (the SIGKILL of `kill_on_drop` would reach the
/// master alone and leave the workers serving).
pub struct Nginx(Child);

impl Nginx {
    /// The master's process id.
    pub fn id(&self) -> u32 {
        self.0.id().expect("nginx runs")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let Some(pid) = self.0.id() else {
            return;
        };
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        for _ in 0..200 {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

/// nginx from the machine, proxying everything to `upstream` over a keep-alive pool,
/// buffering off, logging nothing; its base URL.
pub async fn nginx(upstream: &str) -> (Nginx, String) {
    let dir = tempfile::Builder::new()
        .prefix("sandgate-bench-nginx")
        .tempdir()
        .expect("temp dir")
        .keep();
    let port = super::harness::free_port();
    let upstream = upstream.trim_start_matches("http://");
    // As root nginx's workers would run as `nobody`; this bench's user serves.
    let user = if std::env::var("USER").is_ok_and(|user| user == "root") {
        "user root;"
    } else {
        ""
    };
    let temp = dir.display();
    let conf = format!(
        "{user}
daemon off;
worker_processes auto;
pid {temp}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {temp}/body;
  proxy_temp_path {temp}/proxy;
  fastcgi_temp_path {temp}/fastcgi;
  uwsgi_temp_path {temp}/uwsgi;
  scgi_temp_path {temp}/scgi;
  upstream provider {{ server {upstream}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://provider;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}
}}
"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).expect("nginx.conf");
    let child = Command::new("nginx")
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&path)
        .kill_on_drop(true)
        .spawn()
        .expect("nginx (apt-get install nginx)");
    let address = format!("127.0.0.1:{port}");
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(&address).await.is_ok() {
            return (Nginx(child), format!("http://{address}"));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("nginx did not listen on {address}");
}

/// What one `wrk` run measured.
pub struct Wrk {
    pub rate: f64,
    pub p50_ms: f64,
    /// The target's processes' CPU per call, in µs, and the times their threads were put
    /// on a CPU per call (each a wake-up), over the measured cell.
    pub cpu_us: f64,
    pub runs: f64,
}

/// The processes serving `target`'s calls and their threads' CPU use so far.
fn cpu_use(target: &super::Target) -> [u64; 2] {
    target
        .pids()
        .into_iter()
        .filter_map(|pid| super::cpu::cpu_use(Some(pid)))
        .fold([0, 0], |[cpu, runs], [more_cpu, more_runs]| {
            [cpu + more_cpu, runs + more_runs]
        })
}

/// The processes whose parent is `pid` (nginx's workers, of its master).
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    processes
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                // The parent is the second field after the command's closing parenthesis.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|parent| parent.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// The Lua script that makes `wrk` send numbered chat completions with `key`.
fn script(path: &str, key: &str) -> tempfile::NamedTempFile {
    let template = chat_template(false);
    let (before, after) = template.split_once(NUMBER_MARK).expect("the mark");
    let lua = |text: &str| text.replace('\\', "\\\\").replace('"', "\\\"");
    let file = tempfile::NamedTempFile::new().expect("script");
    std::fs::write(
        file.path(),
        format!(
            "local n = 0\nlocal headers = {{}}\nheaders[\"Content-Type\"] = \"application/json\"\nheaders[\"Authorization\"] = \"Bearer {key}\"\nrequest = function()\n  n = n + 1\n  return wrk.format(\"POST\", \"{path}\", headers, \"{}\" .. n .. \"{}\")\nend\n",
            lua(before),
            lua(after)
        ),
    )
    .expect("write script");
    file
}

/// A duration as `wrk` prints it (`812.00us`, `1.21ms`, `2.00s`), in milliseconds.
fn millis(text: &str) -> f64 {
    let (number, factor) = if let Some(number) = text.strip_suffix("us") {
        (number, 0.001)
    } else if let Some(number) = text.strip_suffix("ms") {
        (number, 1.0)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1000.0)
    } else {
        panic!("a duration from wrk: {text}")
    };
    number.parse::<f64>().expect("a number from wrk") * factor
}

/// `wrk` (one thread) at `concurrency` against `target`: `warmup` seconds unmeasured,
/// then `seconds` measured. Fails on any error or answer but 200.
pub async fn wrk(
    target: &super::Target,
    key: &str,
    concurrency: usize,
    warmup: u64,
    seconds: u64,
) -> Wrk {
    let script = script(target.path, key);
    let url = format!("{}{}", target.base, target.path);
    let run = |seconds: u64| {
        let mut command = Command::new("wrk");
        command
            .args(["-t1", &format!("-c{concurrency}"), &format!("-d{seconds}s")])
            .args(["--latency", "-s"])
            .arg(script.path())
            .arg(&url);
        command
    };
    if warmup > 0 {
        run(warmup)
            .output()
            .await
            .expect("wrk (apt-get install wrk)");
    }
    let before = cpu_use(target);
    let output = run(seconds).output().await.expect("wrk");
    let [cpu, runs] = {
        let after = cpu_use(target);
        [after[0] - before[0], after[1] - before[1]]
    };
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "wrk: {text}");
    assert!(
        !text.contains("Non-2xx") && !text.contains("Socket errors"),
        "{}: errors under load:\n{text}",
        target.name
    );
    let field = |label: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(label))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {label} in wrk's output:\n{text}"))
            .to_owned()
    };
    // `  123456 requests in 6.00s, 40.00MB read`
    let calls = text
        .lines()
        .find_map(|line| line.trim().split_once(" requests in "))
        .and_then(|(calls, _)| calls.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no request count in wrk's output:\n{text}"))
        .max(1.0);
    Wrk {
        rate: field("Requests/sec:").parse().expect("a rate"),
        p50_ms: millis(&field("50%")),
        cpu_us: cpu as f64 / calls / 1000.0,
        runs: runs as f64 / calls,
    }
}
