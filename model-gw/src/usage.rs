//! What a call is charged for: the usage an answer reports, bounded by a ceiling, or,
//! where none (or not all of it) came, an estimate that cannot fall short of what the
//! upstream generated.

use serde::{Deserialize, Serialize};

/// The token counts of an answer's `usage`, under OpenAI's names (chat completions,
/// embeddings, completions) or the Responses and Anthropic APIs' (`input_tokens`,
/// `output_tokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(alias = "input_tokens")]
    pub prompt_tokens: Option<u64>,
    #[serde(alias = "output_tokens")]
    pub completion_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
    /// Of the prompt tokens, those the provider read from its cache (OpenAI's
    /// `prompt_tokens_details`, the Responses API's `input_tokens_details`).
    #[serde(
        default,
        alias = "input_tokens_details",
        skip_serializing_if = "Option::is_none"
    )]
    pub prompt_tokens_details: Option<TokenDetails>,
    /// Anthropic's cache reads and writes: beside its input tokens, not among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
}

/// The breakdown of an OpenAI usage's prompt tokens that prices read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

impl Usage {
    /// `self`, with what `later` says in place of what it says too: an Anthropic stream
    /// tells the input tokens first and the output tokens at the end.
    pub fn merge(self, later: Usage) -> Usage {
        let prompt = later.prompt_tokens.or(self.prompt_tokens);
        let completion = later.completion_tokens.or(self.completion_tokens);
        let total = later.total_tokens.or(match (prompt, completion) {
            (Some(prompt), Some(completion)) if later.total_tokens.is_none() => {
                Some(prompt.saturating_add(completion))
            }
            _ => self.total_tokens,
        });
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: total,
            prompt_tokens_details: later.prompt_tokens_details.or(self.prompt_tokens_details),
            cache_read_input_tokens: later
                .cache_read_input_tokens
                .or(self.cache_read_input_tokens),
            cache_creation_input_tokens: later
                .cache_creation_input_tokens
                .or(self.cache_creation_input_tokens),
        }
    }
}

/// The most tokens of each kind (input, output, cache reads, cache writes) one call is
/// charged, whatever its upstream reports: ten million, five times the largest context
/// window offered today (2 million tokens) and more than any one call's output. An
/// upstream's usage is its word: without a ceiling, one answer reporting 2^64-1 tokens
/// would make every budget it counts towards spent, and overflow their sums.
///
/// Not bounded by the bytes relayed: a reasoning model's hidden reasoning tokens are
/// charged without being sent, and an image given by URL is many tokens of a few bytes.
pub const MAX_TOKENS_PER_CALL: u64 = 10_000_000;

impl Usage {
    /// `self` with each count within [`MAX_TOKENS_PER_CALL`] (and the total their sum
    /// when it reported more).
    pub fn bounded(self) -> Usage {
        let cap = |count: Option<u64>| count.map(|count| count.min(MAX_TOKENS_PER_CALL));
        let prompt_tokens = cap(self.prompt_tokens);
        let completion_tokens = cap(self.completion_tokens);
        let sum = prompt_tokens
            .unwrap_or(0)
            .saturating_add(completion_tokens.unwrap_or(0));
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: self
                .total_tokens
                .map(|total| total.min(sum.max(MAX_TOKENS_PER_CALL))),
            prompt_tokens_details: self.prompt_tokens_details.map(|details| TokenDetails {
                cached_tokens: cap(details.cached_tokens),
            }),
            cache_read_input_tokens: cap(self.cache_read_input_tokens),
            cache_creation_input_tokens: cap(self.cache_creation_input_tokens),
        }
    }
}

/// What the gateway knows of a call when it charges it, beside the usage reported.
#[derive(Clone, Copy, Debug, Default)]
pub struct Evidence {
    /// The bytes of the request body sent upstream.
    pub request_bytes: u64,
    /// The bytes of the answer read from the upstream (a stream's, event framing
    /// included), whether or not they reached the client.
    pub answer_bytes: u64,
    /// The request's own bound on its output tokens (`max_tokens`,
    /// `max_completion_tokens`, `max_output_tokens`).
    pub max_output: Option<u64>,
    /// The answer was read to its end (a stream to its last event or its close), so its
    /// usage, if any, is the whole of it.
    pub complete: bool,
}

/// The usage a call is charged, and whether it is an estimate.
///
/// The upstream's own usage when the answer was read to its end and reports its input
/// tokens. Otherwise (a stream that broke, passed its deadline, or that the upstream ended
/// without usage), an estimate that cannot fall short of what was generated:
/// - input: the tokens reported, else the request body's bytes: a token is at least one
///   byte of the text it encodes, and the body holds every byte of the prompt (with its
///   JSON framing besides);
/// - output: the larger of the tokens reported (an Anthropic stream reports a first count
///   at its start) and the bytes of the answer read, or the request's `max_tokens` where
///   smaller (an upstream generates no more than asked): every token generated and
///   streamed is at least one byte of it.
///
/// What is generated without being sent (a model's hidden reasoning) is not in the bytes:
/// `max_tokens` bounds that where the request gives it. An image given by URL is not
/// either. Both are bounded by [`MAX_TOKENS_PER_CALL`] all the same.
pub fn charged(reported: Option<Usage>, evidence: &Evidence) -> (Usage, bool) {
    match reported {
        Some(usage) if evidence.complete && usage.prompt_tokens.is_some() => {
            (usage.bounded(), false)
        }
        reported => {
            let reported = reported.unwrap_or_default();
            let prompt = reported.prompt_tokens.unwrap_or(evidence.request_bytes);
            let streamed = evidence
                .answer_bytes
                .min(evidence.max_output.unwrap_or(u64::MAX));
            let completion = reported.completion_tokens.unwrap_or(0).max(streamed);
            let estimate = Usage {
                prompt_tokens: Some(prompt),
                completion_tokens: Some(completion),
                total_tokens: Some(prompt.saturating_add(completion)),
                ..reported
            };
            (estimate.bounded(), true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstreams_usage_is_held_to_the_ceiling() {
        let huge = Usage {
            prompt_tokens: Some(u64::MAX),
            completion_tokens: Some(u64::MAX),
            total_tokens: Some(u64::MAX),
            prompt_tokens_details: Some(TokenDetails {
                cached_tokens: Some(u64::MAX),
            }),
            cache_read_input_tokens: Some(u64::MAX),
            cache_creation_input_tokens: Some(u64::MAX),
        };
        let evidence = Evidence {
            complete: true,
            ..Evidence::default()
        };
        let (charged, estimated) = charged(Some(huge), &evidence);
        assert!(!estimated);
        assert_eq!(charged.prompt_tokens, Some(MAX_TOKENS_PER_CALL));
        assert_eq!(charged.completion_tokens, Some(MAX_TOKENS_PER_CALL));
        assert_eq!(charged.total_tokens, Some(2 * MAX_TOKENS_PER_CALL));
        assert_eq!(charged.cache_read_input_tokens, Some(MAX_TOKENS_PER_CALL));
        assert_eq!(
            charged.cache_creation_input_tokens,
            Some(MAX_TOKENS_PER_CALL)
        );
        assert_eq!(
            charged
                .prompt_tokens_details
                .and_then(|details| details.cached_tokens),
            Some(MAX_TOKENS_PER_CALL)
        );
        // Merging what such an upstream says does not overflow either.
        let merged = Usage {
            prompt_tokens: Some(u64::MAX),
            ..Usage::default()
        }
        .merge(Usage {
            completion_tokens: Some(u64::MAX),
            ..Usage::default()
        });
        assert_eq!(merged.total_tokens, Some(u64::MAX));
    }

    #[test]
    fn a_complete_answers_usage_is_charged_as_reported() {
        let usage = Usage {
            prompt_tokens: Some(12),
            completion_tokens: Some(30),
            total_tokens: Some(42),
            ..Usage::default()
        };
        let evidence = Evidence {
            request_bytes: 5_000,
            answer_bytes: 9_000,
            max_output: None,
            complete: true,
        };
        assert_eq!(charged(Some(usage), &evidence), (usage, false));
    }

    #[test]
    fn without_usage_the_estimate_is_the_bytes_or_max_tokens_where_smaller() {
        let broken = Evidence {
            request_bytes: 300,
            answer_bytes: 2_000,
            max_output: None,
            complete: false,
        };
        let (usage, estimated) = charged(None, &broken);
        assert!(estimated);
        assert_eq!(usage.prompt_tokens, Some(300));
        assert_eq!(usage.completion_tokens, Some(2_000));
        assert_eq!(usage.total_tokens, Some(2_300));
        let capped = Evidence {
            max_output: Some(50),
            ..broken
        };
        assert_eq!(charged(None, &capped).0.completion_tokens, Some(50));
        // A stream read to its end that reported nothing is estimated too.
        let silent = Evidence {
            complete: true,
            ..broken
        };
        assert!(charged(None, &silent).1);
        // Anthropic's first count (input, and one output token) is kept for the input
        // and raised to the estimate for the output.
        let started = Usage {
            prompt_tokens: Some(7),
            completion_tokens: Some(1),
            cache_read_input_tokens: Some(100),
            ..Usage::default()
        };
        let (usage, estimated) = charged(Some(started), &broken);
        assert!(estimated);
        assert_eq!(usage.prompt_tokens, Some(7));
        assert_eq!(usage.completion_tokens, Some(2_000));
        assert_eq!(usage.cache_read_input_tokens, Some(100));
    }
}
