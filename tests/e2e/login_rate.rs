//! Admin login attempts limited per client address: the 11th attempt in a window gets 429
//! with `Retry-After`, other addresses are not affected, the limit holds across replicas
//! and cannot be dodged with a forged header, and the client logs in once its window has
//! passed; and the account has a bound of its own, whatever the addresses. Clients come
//! from distinct loopback addresses (Linux routes all of 127/8 to the loopback interface,
//! so a socket may bind any of them).

use std::net::IpAddr;
use std::time::Duration;

use reqwest::StatusCode;
use sandgate_proto::CLIENT_ADDRESS_METADATA;
use sandgate_proto::admin::v1::GetChallengeRequest;
use sandgate_proto::admin::v1::runtime_admin_client::RuntimeAdminClient;
use sandgate_proto::error::{ErrorCode, ErrorDetail};
use sandgate_runtime_api::admin::login::login_hash;
use serde_json::{Value, json};

use crate::common::{ADMIN_PASSWORD, Backend, JWT_SECRET, Sandgate};

const RATE: u32 = 10;
/// Long enough for a test's attempts to fall into one window, short enough to wait out.
const WINDOW_SECONDS: u64 = 3;
/// A window no test waits out.
const LONG_WINDOW: u64 = 600;

async fn start(backend: &Backend, extra: &[&str]) -> Sandgate {
    start_windowed(backend, WINDOW_SECONDS, extra).await
}

/// [`start`] with windows of `seconds`: a test that never waits a window out takes a long
/// one, so that its steps fall into one window however slow the machine.
async fn start_windowed(backend: &Backend, seconds: u64, extra: &[&str]) -> Sandgate {
    let window = seconds.to_string();
    let rate = RATE.to_string();
    let mut args = vec![
        "--admin-password",
        ADMIN_PASSWORD,
        "--jwt-secret",
        JWT_SECRET,
        "--pbkdf2-iterations",
        "1000",
        "--admin-login-rate",
        &rate,
        "--admin-login-rate-window",
        &window,
    ];
    args.extend(extra);
    Sandgate::start_with(backend, &args).await
}

/// A client whose connections come from `address`.
fn client_from(address: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(address.parse::<IpAddr>().expect("address"))
        .build()
        .expect("client")
}

/// An answer: its status, `Retry-After` (seconds) and body.
struct Answer {
    status: StatusCode,
    retry_after: Option<u64>,
    body: Value,
}

async fn answer(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.expect("request");
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().expect("ASCII").parse().expect("seconds"));
    Answer {
        status: response.status(),
        retry_after,
        body: response.json().await.expect("JSON"),
    }
}

async fn challenge(client: &reqwest::Client, sandgate: &Sandgate) -> Answer {
    answer(
        client
            .get(sandgate.url("/api/admin/challenge"))
            // Forged: the edge must key the client by its TCP address regardless.
            .header(CLIENT_ADDRESS_METADATA, uuid_address())
            .header("x-forwarded-for", uuid_address()),
    )
    .await
}

async fn login(client: &reqwest::Client, sandgate: &Sandgate, body: &Value) -> Answer {
    answer(
        client
            .post(sandgate.url("/api/admin/login"))
            .header(CLIENT_ADDRESS_METADATA, uuid_address())
            .header("x-forwarded-for", uuid_address())
            .json(body),
    )
    .await
}

/// A different made-up address each time.
fn uuid_address() -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    format!("10.{}.{}.{}", bytes[0], bytes[1], bytes[2])
}

/// The answer to `challenge`, with `password`.
fn answered(challenge: &Value, password: &str) -> Value {
    let hash = login_hash(
        password,
        challenge["salt"].as_str().expect("salt"),
        challenge["challenge"].as_str().expect("challenge"),
        challenge["iterations"].as_u64().expect("iterations") as u32,
    );
    json!({ "challenge": challenge["challenge"], "hash": hash })
}

/// A 429 as the contract says: `Retry-After` within the window, and the same seconds in
/// the detail. Returns them.
fn assert_limited(answer: &Answer, what: &str) -> u64 {
    assert_limited_in(answer, WINDOW_SECONDS, what)
}

/// [`assert_limited`] for windows of `window` seconds.
fn assert_limited_in(answer: &Answer, window: u64, what: &str) -> u64 {
    assert_eq!(answer.status, 429, "{what}: {}", answer.body);
    let seconds = answer.retry_after.expect("Retry-After");
    assert!(
        (1..=window).contains(&seconds),
        "{what}: Retry-After {seconds}"
    );
    assert_eq!(
        answer.body,
        json!({ "detail": format!("Too many login attempts; retry in {seconds} seconds") }),
        "{what}"
    );
    seconds
}

async fn ten_attempts_then_429_per_client_address(backend: Backend) {
    let sandgate = start(&backend, &[]).await;
    let first = client_from("127.0.0.1");
    let second = client_from("127.0.0.2");
    for attempt in 1..=RATE {
        let issued = challenge(&first, &sandgate).await;
        assert_eq!(issued.status, 200, "challenge {attempt}: {}", issued.body);
        let refused = login(&first, &sandgate, &answered(&issued.body, "wrong password")).await;
        assert_eq!(refused.status, 401, "login {attempt}: {}", refused.body);
        assert_eq!(refused.retry_after, None);
    }
    // The 11th login, even with a good answer (to a challenge the other client got), and
    // the 11th challenge.
    let issued = challenge(&second, &sandgate).await;
    assert_eq!(issued.status, 200);
    let good = answered(&issued.body, ADMIN_PASSWORD);
    let login_wait = assert_limited(&login(&first, &sandgate, &good).await, "11th login");
    let challenge_wait = assert_limited(&challenge(&first, &sandgate).await, "11th challenge");

    // Another address is not affected: the challenge the 11th login did not spend works.
    let logged_in = login(&second, &sandgate, &good).await;
    assert_eq!(logged_in.status, 200, "{}", logged_in.body);

    // Once its windows have passed, the first client logs in.
    tokio::time::sleep(Duration::from_secs(login_wait.max(challenge_wait))).await;
    let issued = challenge(&first, &sandgate).await;
    assert_eq!(issued.status, 200, "{}", issued.body);
    let logged_in = login(&first, &sandgate, &answered(&issued.body, ADMIN_PASSWORD)).await;
    assert_eq!(logged_in.status, 200, "{}", logged_in.body);
    assert!(logged_in.body["token"].is_string());
}

crate::on_both_backends!(
    ten_attempts_then_429_per_client_address,
    many_addresses_do_not_multiply_the_guesses,
);

const ACCOUNT_RATE: u32 = 12;

/// Addresses are cheap: the account's bound holds whatever their number. Four addresses,
/// each under its own limit, make the account's twelve judged guesses; past the bound
/// each of them is refused unjudged, even with the right password, and a fifth address
/// gets one judged guess; the admin, who guessed nothing, is judged and logs in.
async fn many_addresses_do_not_multiply_the_guesses(backend: Backend) {
    // Past the bound a client's counts are kept per period of the window, counted from
    // the epoch: the guesses must fall in one. Near a period's end, the next is waited for.
    let window = u128::from(LONG_WINDOW) * 1000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis();
    let left = window - now % window;
    if left < 60_000 {
        let left = u64::try_from(left).expect("under a minute");
        tokio::time::sleep(Duration::from_millis(left + 20)).await;
    }
    let account_rate = ACCOUNT_RATE.to_string();
    let sandgate = start_windowed(
        &backend,
        LONG_WINDOW,
        &["--admin-login-account-rate", &account_rate],
    )
    .await;
    let guessers: Vec<reqwest::Client> = (20..24)
        .map(|host| client_from(&format!("127.0.0.{host}")))
        .collect();
    for attempt in 0..ACCOUNT_RATE as usize {
        let guesser = &guessers[attempt % guessers.len()];
        let issued = challenge(guesser, &sandgate).await;
        assert_eq!(issued.status, 200, "challenge {attempt}: {}", issued.body);
        let refused = login(guesser, &sandgate, &answered(&issued.body, "guess")).await;
        assert_eq!(refused.status, 401, "guess {attempt}: {}", refused.body);
    }
    for (n, guesser) in guessers.iter().enumerate() {
        let issued = challenge(guesser, &sandgate).await;
        assert_eq!(issued.status, 200, "a challenge is not a guess");
        assert_limited_in(
            &login(guesser, &sandgate, &answered(&issued.body, ADMIN_PASSWORD)).await,
            LONG_WINDOW,
            &format!("guesser {n} past the account's bound, even with the password"),
        );
    }
    let fresh = client_from("127.0.0.25");
    let issued = challenge(&fresh, &sandgate).await;
    let refused = login(&fresh, &sandgate, &answered(&issued.body, "guess")).await;
    assert_eq!(refused.status, 401, "one judged guess: {}", refused.body);
    let issued = challenge(&fresh, &sandgate).await;
    assert_limited_in(
        &login(&fresh, &sandgate, &answered(&issued.body, "guess")).await,
        LONG_WINDOW,
        "its second guess",
    );
    let admin = client_from("127.0.0.24");
    for n in 0..3 {
        let issued = challenge(&admin, &sandgate).await;
        let logged_in = login(&admin, &sandgate, &answered(&issued.body, ADMIN_PASSWORD)).await;
        assert_eq!(logged_in.status, 200, "admin login {n}: {}", logged_in.body);
    }
}

/// A stranger with no credential cannot lock the admin out: a guesser on three addresses
/// tries as fast as it can for three windows while the admin logs in every second, and
/// every one of the admin's logins succeeds. The guesser is still held to the bound: its
/// judged guesses stay within the account's bound and one per address a window.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_guesser_cannot_lock_the_admin_out() {
    const WINDOW: u64 = 2;
    let backend = Backend::embedded();
    let account_rate = ACCOUNT_RATE.to_string();
    let window = WINDOW.to_string();
    let rate = RATE.to_string();
    let sandgate = std::sync::Arc::new(
        Sandgate::start_with(
            &backend,
            &[
                "--admin-password",
                ADMIN_PASSWORD,
                "--jwt-secret",
                JWT_SECRET,
                "--pbkdf2-iterations",
                "1000",
                "--admin-login-rate",
                &rate,
                "--admin-login-rate-window",
                &window,
                "--admin-login-account-rate",
                &account_rate,
            ],
        )
        .await,
    );
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let guessers: Vec<_> = (30..33)
        .map(|host| {
            let (sandgate, done) = (sandgate.clone(), done.clone());
            tokio::spawn(async move {
                let guesser = client_from(&format!("127.0.0.{host}"));
                let (mut judged, mut refused) = (0u32, 0u32);
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let issued = challenge(&guesser, &sandgate).await;
                    if issued.status != 200 {
                        assert_eq!(issued.status, 429, "{}", issued.body);
                        refused += 1;
                        // Pacing, not waiting for anything: spare the loaded machine.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    let answer = login(&guesser, &sandgate, &answered(&issued.body, "guess")).await;
                    match answer.status.as_u16() {
                        401 => judged += 1,
                        429 => refused += 1,
                        other => panic!("a guess answered {other}: {}", answer.body),
                    }
                }
                (judged, refused)
            })
        })
        .collect();
    let admin = client_from("127.0.0.33");
    let began = std::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut logins = 0;
    // One a second for three windows: a count, not a clock, so a slow machine makes the
    // run longer, never the test wrong.
    while logins < 3 * WINDOW {
        tick.tick().await;
        let issued = challenge(&admin, &sandgate).await;
        assert_eq!(
            issued.status, 200,
            "admin challenge {logins}: {}",
            issued.body
        );
        let logged_in = login(&admin, &sandgate, &answered(&issued.body, ADMIN_PASSWORD)).await;
        assert_eq!(
            logged_in.status, 200,
            "admin login {logins}: {}",
            logged_in.body
        );
        logins += 1;
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (mut judged, mut refused) = (0, 0);
    for guesser in guessers {
        let (j, r) = guesser.await.expect("guesser");
        (judged, refused) = (judged + j, refused + r);
    }
    assert!(refused > 0, "the guesser was never refused");
    // Windows open with a first hit: the run spans at most this many of the account's.
    let windows = u32::try_from(began.elapsed().as_secs() / WINDOW + 2).expect("windows");
    assert!(
        judged <= windows * (ACCOUNT_RATE + 3),
        "{judged} judged guesses in {windows} windows"
    );
}

/// Attempts against two replicas on one Redis count together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_holds_across_replicas() {
    let backend = Backend::redis().await;
    let replicas = [start(&backend, &[]).await, start(&backend, &[]).await];
    let client = client_from("127.0.0.3");
    let unknown = json!({"challenge": "feed", "hash": "00"});
    for attempt in 0..RATE as usize {
        let refused = login(&client, &replicas[attempt % 2], &unknown).await;
        assert_eq!(refused.status, 401, "attempt {attempt}: {}", refused.body);
    }
    for replica in &replicas {
        assert_limited(&login(&client, replica, &unknown).await, "past the limit");
    }
}

/// A gRPC caller on `serve`'s public port is known by its TCP address: naming another
/// client in the metadata does not reset its count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_grpc_caller_cannot_name_another_client() {
    let backend = Backend::embedded();
    let sandgate = start(&backend, &[]).await;
    let mut grpc = RuntimeAdminClient::connect(sandgate.url(""))
        .await
        .expect("gRPC connection");
    let call = |grpc: &mut RuntimeAdminClient<tonic::transport::Channel>| {
        let mut request = tonic::Request::new(GetChallengeRequest {});
        request.metadata_mut().insert(
            CLIENT_ADDRESS_METADATA,
            uuid_address().parse().expect("metadata"),
        );
        let mut grpc = grpc.clone();
        async move { grpc.get_challenge(request).await }
    };
    for attempt in 1..=RATE {
        assert!(call(&mut grpc).await.is_ok(), "challenge {attempt}");
    }
    let refused = call(&mut grpc).await.expect_err("past the limit");
    let detail = ErrorDetail::from_status(&refused);
    assert_eq!(detail.code(), ErrorCode::RateLimited);
    assert!((1..=WINDOW_SECONDS as u32).contains(&detail.retry_after_seconds));
    // The REST edge's clients have their own counts.
    assert_eq!(
        challenge(&client_from("127.0.0.4"), &sandgate).await.status,
        200
    );
}

/// Behind a trusted proxy, each client the proxy names has its own count; an untrusted
/// peer's `X-Forwarded-For` is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_proxies_name_the_client() {
    let backend = Backend::embedded();
    let sandgate = start(&backend, &["--trusted-proxies", "127.0.0.5/32"]).await;
    let proxy = client_from("127.0.0.5");
    let untrusted = client_from("127.0.0.6");
    let unknown = json!({"challenge": "feed", "hash": "00"});
    let via = |client: &reqwest::Client, forwarded: &str| {
        answer(
            client
                .post(sandgate.url("/api/admin/login"))
                .header("x-forwarded-for", forwarded)
                .json(&unknown),
        )
    };
    for attempt in 1..=RATE {
        // A client's own forged entry comes first; the proxy appends what it saw.
        let refused = via(&proxy, &format!("{}, 203.0.113.1", uuid_address())).await;
        assert_eq!(refused.status, 401, "attempt {attempt}");
    }
    assert_limited(&via(&proxy, "203.0.113.1").await, "the proxied client");
    assert_eq!(via(&proxy, "203.0.113.2").await.status, 401, "another one");
    // From an untrusted peer, the header names nobody: the peer has its own count.
    assert_eq!(via(&untrusted, "203.0.113.1").await.status, 401);
}
