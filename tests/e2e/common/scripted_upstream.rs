//! An OpenAI-compatible upstream that misbehaves on cue: each request gets the next reply
//! of a script (an error status, a stream cut by a reset, a silence), then plain 200s.
//! Raw HTTP/1.1 over TCP, one request per connection, so that a reply can do what no
//! well-behaved server framework would: reset the connection mid-body.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

/// The model every answer names: the gateway renames it to the one asked for.
pub const UPSTREAM_MODEL: &str = "up-model";

/// What the upstream does with one request.
pub enum Reply {
    /// An answer with this status, extra headers and JSON body.
    Answer {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// A server-sent event stream of `events` events, ended as `end` says.
    Stream { events: usize, end: StreamEnd },
    /// A server-sent event stream of these whole events (each with its blank line), in
    /// order: the first `hold` of them at once, the rest once `then` is notified, `pace`
    /// apart (so that a gateway writes each to its client on its own); the answer then
    /// ends (with a reset when `reset`).
    Events {
        events: Vec<String>,
        hold: usize,
        then: Arc<Notify>,
        pace: Duration,
        reset: bool,
    },
    /// A JSON answer announcing more bytes than it sends, then a reset.
    ResetMidBody,
    /// The request is read, then the connection reset before any answer.
    ResetBeforeAnswer,
    /// The request is read and never answered.
    Silence,
}

/// How a [`Reply::Stream`] ends.
pub enum StreamEnd {
    /// A reset, once the notify is notified (after the client saw the events).
    ResetOn(Arc<Notify>),
    /// One more event and `[DONE]`, once the notify is notified.
    FinishOn(Arc<Notify>),
    /// `[DONE]`, the answer's last event, then the stream stays open (an upstream whose
    /// stream ends some time after its last event) until the gateway closes it, and the
    /// notify is notified then.
    DoneThenHoldUntilClosed(Arc<Notify>),
}

impl Reply {
    /// An error answer in OpenAI's shape.
    pub fn status(status: u16, message: &str) -> Self {
        Self::Answer {
            status,
            headers: Vec::new(),
            body: error_body(status, message),
        }
    }

    /// An error answer with a `Retry-After` header.
    pub fn status_retry_after(status: u16, retry_after: &str) -> Self {
        Self::Answer {
            status,
            headers: vec![("retry-after", retry_after.to_owned())],
            body: error_body(status, "slow down"),
        }
    }

    /// A successful completion.
    pub fn ok() -> Self {
        Self::Answer {
            status: 200,
            headers: Vec::new(),
            body: completion(),
        }
    }
}

pub fn error_body(status: u16, message: &str) -> String {
    serde_json::json!({"error": {"message": message, "type": "upstream", "param": null, "code": status.to_string()}})
        .to_string()
}

fn completion() -> String {
    serde_json::json!({
        "id": "c1", "object": "chat.completion", "model": UPSTREAM_MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    })
    .to_string()
}

/// The `index`th event of a stream: its content is `part {index}`.
pub fn event(index: usize) -> String {
    let chunk = serde_json::json!({
        "id": "c1", "object": "chat.completion.chunk", "model": UPSTREAM_MODEL,
        "choices": [{"index": 0, "delta": {"content": format!("part {index}")}}],
    });
    format!("data: {chunk}\n\n")
}

struct Shared {
    script: Mutex<VecDeque<Reply>>,
    /// The body of every request, in arrival order.
    bodies: watch::Sender<Vec<Bytes>>,
}

pub struct ScriptedUpstream {
    address: SocketAddr,
    shared: Arc<Shared>,
}

impl ScriptedUpstream {
    /// Listens on port 0; requests get `script` in order, then 200s.
    pub async fn start(script: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into()),
            bodies: watch::channel(Vec::new()).0,
        });
        let accepting = shared.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, accepting.clone()));
            }
        });
        Self { address, shared }
    }

    /// The `api_base` of a `gateway_proxy/` entry.
    pub fn base(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The bodies of the requests so far.
    pub fn bodies(&self) -> Vec<Bytes> {
        self.shared.bodies.borrow().clone()
    }

    /// Waits until `count` requests have arrived; panics after `within`.
    pub async fn wait_for_requests(&self, count: usize, within: Duration) {
        let mut bodies = self.shared.bodies.subscribe();
        let arrived = tokio::time::timeout(within, bodies.wait_for(|seen| seen.len() >= count));
        assert!(
            matches!(arrived.await, Ok(Ok(_))),
            "{count} requests did not arrive within {within:?}"
        );
    }
}

/// Reads one request (head and `content-length` body); `None` when the peer left first.
async fn read_request(socket: &mut TcpStream) -> Option<Bytes> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let body_start = end + 4;
            while buffer.len() < body_start + length {
                let read = socket.read(&mut chunk).await.ok()?;
                if read == 0 {
                    return None;
                }
                buffer.extend_from_slice(&chunk[..read]);
            }
            return Some(Bytes::copy_from_slice(
                &buffer[body_start..body_start + length],
            ));
        }
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

fn head(status: u16, headers: &[(&str, &str)]) -> String {
    let mut head = format!("HTTP/1.1 {status} Scripted\r\nconnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// One HTTP/1.1 chunk of a chunked body.
fn chunk(data: &str) -> String {
    format!("{:x}\r\n{data}\r\n", data.len())
}

/// Resets the connection: RST, not FIN, so the peer reads an error rather than an end.
fn reset(socket: TcpStream) {
    socket.set_zero_linger().expect("SO_LINGER 0");
    drop(socket);
}

async fn serve(mut socket: TcpStream, shared: Arc<Shared>) {
    let Some(body) = read_request(&mut socket).await else {
        return;
    };
    let reply = shared
        .script
        .lock()
        .expect("script")
        .pop_front()
        .unwrap_or_else(Reply::ok);
    shared.bodies.send_modify(|bodies| bodies.push(body));
    // A write fails only when the gateway has gone: nothing is left to do for it.
    drop(answer(socket, reply).await);
}

async fn answer(mut socket: TcpStream, reply: Reply) -> std::io::Result<()> {
    match reply {
        Reply::Answer {
            status,
            headers,
            body,
        } => {
            let length = body.len().to_string();
            let mut all: Vec<(&str, &str)> = vec![
                ("content-type", "application/json"),
                ("content-length", &length),
            ];
            all.extend(headers.iter().map(|(name, value)| (*name, value.as_str())));
            socket.write_all(head(status, &all).as_bytes()).await?;
            socket.write_all(body.as_bytes()).await?;
            socket.shutdown().await
        }
        Reply::Stream { events, end } => {
            let headers = [
                ("content-type", "text/event-stream"),
                ("transfer-encoding", "chunked"),
            ];
            socket.write_all(head(200, &headers).as_bytes()).await?;
            for index in 0..events {
                socket.write_all(chunk(&event(index)).as_bytes()).await?;
                socket.flush().await?;
            }
            match end {
                StreamEnd::ResetOn(notify) => {
                    notify.notified().await;
                    reset(socket);
                    return Ok(());
                }
                StreamEnd::FinishOn(notify) => {
                    notify.notified().await;
                    socket.write_all(chunk(&event(events)).as_bytes()).await?;
                }
                StreamEnd::DoneThenHoldUntilClosed(closed) => {
                    socket
                        .write_all(chunk("data: [DONE]\n\n").as_bytes())
                        .await?;
                    socket.flush().await?;
                    let mut byte = [0_u8; 1];
                    while matches!(socket.read(&mut byte).await, Ok(read) if read > 0) {}
                    closed.notify_one();
                    return Ok(());
                }
            }
            socket
                .write_all(chunk("data: [DONE]\n\n").as_bytes())
                .await?;
            socket.write_all(b"0\r\n\r\n").await?;
            socket.shutdown().await
        }
        Reply::Events {
            events,
            hold,
            then,
            pace,
            reset: reset_at_end,
        } => {
            let headers = [
                ("content-type", "text/event-stream"),
                ("transfer-encoding", "chunked"),
            ];
            socket.write_all(head(200, &headers).as_bytes()).await?;
            for (index, event) in events.iter().enumerate() {
                if index == hold {
                    then.notified().await;
                }
                if index > hold {
                    tokio::time::sleep(pace).await;
                }
                socket.write_all(chunk(event).as_bytes()).await?;
                socket.flush().await?;
            }
            if events.len() <= hold {
                then.notified().await;
            }
            if reset_at_end {
                reset(socket);
                return Ok(());
            }
            socket.write_all(b"0\r\n\r\n").await?;
            socket.shutdown().await
        }
        Reply::ResetMidBody => {
            let body = completion();
            let length = (body.len() * 2).to_string();
            let headers = [
                ("content-type", "application/json"),
                ("content-length", length.as_str()),
            ];
            socket.write_all(head(200, &headers).as_bytes()).await?;
            socket.write_all(body.as_bytes()).await?;
            socket.flush().await?;
            reset(socket);
            Ok(())
        }
        Reply::ResetBeforeAnswer => {
            reset(socket);
            Ok(())
        }
        Reply::Silence => {
            // Held open, unanswered, until the test ends.
            let _held = socket;
            std::future::pending().await
        }
    }
}
