//! Calls in flight, bounded where the hop header cannot help.
//!
//! - Per entry: an entry's `max_parallel_requests` (LiteLLM's key in `litellm_params`)
//!   is the most of its calls this replica has in flight at once; past it, 429, as
//!   LiteLLM's proxy answers.
//! - Per prompt: a loop through a hop that drops `x-sandgate-hop` (a LiteLLM proxy that
//!   forwards no headers, routing back to this gateway) brings the same prompt back,
//!   nested, each call waiting for the next. The hop serializes the body the same way
//!   each time, so from its second pass on every level carries the same bytes: at most
//!   [`MAX_SAME_PROMPT`] calls with one prompt are in flight at once, and the next is
//!   refused (400: a status no gateway retries, or every level of the loop would try
//!   again) before it goes upstream. A loop is stopped within a few calls; a client
//!   asking for several answers to one prompt at once asks with `n`. Counted per
//!   caller (a virtual key, or the master key): a hop calls back with its one key at
//!   every level, and the same prompt sent by other callers at once (a greeting, a
//!   benchmark's) is no loop of theirs, and never refused on their account.
//!
//! Both count in this replica's memory, and a call holds its place until its answer has
//! been relayed whole (or the client went away). A prompt is counted by a 64-bit hash of
//! its caller and its bytes, seeded at random per process (foldhash): a bound on loops,
//! not a secret, for which a cryptographic digest cost a coding agent's 100 KB prompt
//! about 56 µs a call, this hash 4 µs. Two of one caller's prompts in flight share a count
//! once in 2^64; another caller's cannot be aimed at without the seed.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use sandgate_proto::error::ErrorCode;
use sandgate_proto::models::CallStream;
use tonic::Status;

use crate::rewrite::ChatRequest;
use crate::routing::Upstream;
use crate::support::error;

/// Calls with one prompt in flight at once, at most.
pub const MAX_SAME_PROMPT: usize = 4;

/// The members that hold a call's prompt, in the gateway's APIs.
const PROMPT_MEMBERS: [&str; 3] = ["messages", "input", "prompt"];

/// What is in flight: counts per entry and per prompt.
#[derive(Default)]
pub struct InFlight {
    counts: Mutex<Counts>,
    /// The seed of the prompts' hashes.
    prompt_hashes: foldhash::quality::RandomState,
}

#[derive(Default)]
struct Counts {
    entries: HashMap<String, u32>,
    prompts: HashMap<u64, usize>,
}

/// A call's place in flight, given back when dropped.
pub struct Held {
    in_flight: Arc<InFlight>,
    entry: Option<String>,
    prompt: Option<u64>,
}

impl InFlight {
    /// Takes a place for a call of `request` to `upstream` by `caller` (who it is: a
    /// key's token, or the master key's mark), or refuses it: 400 when the caller has
    /// its prompt in flight [`MAX_SAME_PROMPT`] times already, 429 when its entry has
    /// `max_parallel_requests` calls in flight.
    pub fn enter(
        self: &Arc<Self>,
        request: &ChatRequest<'_>,
        upstream: &Upstream,
        caller: &str,
    ) -> Result<Held, Status> {
        let prompt = PROMPT_MEMBERS
            .iter()
            .find_map(|name| request.member(name))
            .map(|raw| {
                let mut hash = self.prompt_hashes.build_hasher();
                hash.write(caller.as_bytes());
                hash.write_u8(0);
                hash.write(raw.as_bytes());
                hash.finish()
            });
        let limit = upstream.params.max_parallel_requests;
        let mut counts = self
            .counts
            .lock()
            .map_err(|_| error(ErrorCode::Internal, "the in-flight table is poisoned"))?;
        if let Some(prompt) = &prompt
            && counts.prompts.get(prompt).copied().unwrap_or(0) >= MAX_SAME_PROMPT
        {
            tracing::warn!(
                model_entry = %upstream.entry,
                "the same prompt is in flight {MAX_SAME_PROMPT} times: a loop through a hop that drops the hop header; refused"
            );
            return Err(error(
                ErrorCode::BadRequest,
                format!(
                    "the same prompt is in flight {MAX_SAME_PROMPT} times at once: a loop back to this gateway through a hop that drops {} (or ask for several answers with `n`)",
                    crate::egress::HOP_HEADER
                ),
            ));
        }
        if let Some(limit) = limit
            && counts.entries.get(&upstream.entry).copied().unwrap_or(0) >= limit
        {
            return Err(error(
                ErrorCode::RateLimited,
                format!(
                    "Max parallel request limit reached: model {} takes {limit} calls at once",
                    upstream.entry
                ),
            ));
        }
        if let Some(prompt) = prompt {
            *counts.prompts.entry(prompt).or_default() += 1;
        }
        let entry = limit.map(|_| upstream.entry.clone());
        if let Some(entry) = &entry {
            *counts.entries.entry(entry.clone()).or_default() += 1;
        }
        Ok(Held {
            in_flight: self.clone(),
            entry,
            prompt,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Ok(mut counts) = self.in_flight.counts.lock() else {
            return;
        };
        if let Some(prompt) = &self.prompt
            && let Some(count) = counts.prompts.get_mut(prompt)
        {
            *count -= 1;
            if *count == 0 {
                counts.prompts.remove(prompt);
            }
        }
        if let Some(entry) = &self.entry
            && let Some(count) = counts.entries.get_mut(entry)
        {
            *count -= 1;
            if *count == 0 {
                counts.entries.remove(entry);
            }
        }
    }
}

/// `stream`, holding `held` until it is dropped (relayed whole, or the client went away).
pub fn holding(stream: CallStream, held: Held) -> CallStream {
    Box::pin(stream.map(move |item| {
        let _ = &held;
        item
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CallParams;
    use crate::routing::Kind;
    use sandgate_proto::error::ErrorDetail;

    fn upstream(entry: &str, max_parallel_requests: Option<u32>) -> Upstream {
        Upstream {
            entry: entry.into(),
            kind: Kind::OpenAi,
            base: None,
            model: "m".into(),
            api_key: String::new(),
            params: CallParams {
                max_parallel_requests,
                ..CallParams::default()
            },
            prices: crate::budget::Prices::default(),
            guarded: false,
        }
    }

    fn code(result: Result<Held, Status>) -> Option<ErrorCode> {
        result
            .err()
            .map(|status| ErrorDetail::from_status(&status).code())
    }

    #[test]
    fn one_prompt_is_in_flight_a_few_times_at_most() {
        let in_flight = Arc::new(InFlight::default());
        let body = br#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
        let request = ChatRequest::parse(body).expect("body");
        let upstream = upstream("m", None);
        let held: Vec<Held> = (0..MAX_SAME_PROMPT)
            .map(|_| in_flight.enter(&request, &upstream, "k").expect("a place"))
            .collect();
        assert_eq!(
            code(in_flight.enter(&request, &upstream, "k")),
            Some(ErrorCode::BadRequest)
        );
        // Another caller's same prompt is no loop of its own; another prompt is not
        // affected; one answered makes room.
        let theirs: Vec<Held> = (0..MAX_SAME_PROMPT)
            .map(|_| in_flight.enter(&request, &upstream, "j").expect("theirs"))
            .collect();
        let other = ChatRequest::parse(br#"{"model": "m", "input": "hello"}"#).expect("body");
        assert!(in_flight.enter(&other, &upstream, "k").is_ok());
        drop(theirs);
        drop(held);
        assert!(in_flight.enter(&request, &upstream, "k").is_ok());
        assert!(in_flight.counts.lock().expect("lock").prompts.is_empty());
    }

    #[test]
    fn an_entry_takes_its_max_parallel_requests() {
        let in_flight = Arc::new(InFlight::default());
        let limited = upstream("limited", Some(2));
        let open = upstream("open", None);
        let prompt = |n: usize| format!(r#"{{"model": "m", "messages": "{n}"}}"#);
        let bodies: Vec<String> = (0..10).map(prompt).collect();
        let requests: Vec<ChatRequest<'_>> = bodies
            .iter()
            .map(|body| ChatRequest::parse(body.as_bytes()).expect("body"))
            .collect();
        let first = in_flight.enter(&requests[0], &limited, "k").expect("first");
        let _second = in_flight
            .enter(&requests[1], &limited, "k")
            .expect("second");
        assert_eq!(
            code(in_flight.enter(&requests[2], &limited, "k")),
            Some(ErrorCode::RateLimited)
        );
        let _open: Vec<Held> = requests[3..]
            .iter()
            .map(|request| in_flight.enter(request, &open, "k").expect("no limit"))
            .collect();
        drop(first);
        assert!(in_flight.enter(&requests[2], &limited, "k").is_ok());
    }
}
