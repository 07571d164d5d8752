//! What a call costs and when a budget starts again: an entry's prices, in LiteLLM's
//! `model_info` keys, applied to the usage an answer reports; a key's budget windows,
//! in LiteLLM's `budget_duration` forms.

use sandgate_store::{BudgetPeriod, StoredKey};

use crate::rewrite::Usage;

/// An entry's prices per token, in whatever currency its operator counts (LiteLLM's
/// `model_info`: `input_cost_per_token`, `output_cost_per_token`,
/// `cache_read_input_token_cost`, `cache_creation_input_token_cost`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Prices {
    pub input: Option<f64>,
    pub output: Option<f64>,
    pub cache_read: Option<f64>,
    pub cache_creation: Option<f64>,
    /// The most output tokens a call can be billed for (`model_info.max_output_tokens`):
    /// what bounds a call's hold when it names no `max_tokens` (see `admit`).
    pub max_output_tokens: Option<u64>,
}

impl Eq for Prices {}

/// The keys of each price, in `model_info` and in `litellm_params` alike.
pub const PRICE_KEYS: [&str; 4] = [
    "input_cost_per_token",
    "output_cost_per_token",
    "cache_read_input_token_cost",
    "cache_creation_input_token_cost",
];

impl Prices {
    /// The prices `model_info` names; a price that is not a finite, non-negative number
    /// is an error naming its key.
    pub fn from_model_info(model_info: Option<&serde_json::Value>) -> Result<Self, String> {
        let Some(info) = model_info else {
            return Ok(Self::default());
        };
        let price = |key: &str| -> Result<Option<f64>, String> {
            match info.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(value) => value
                    .as_f64()
                    .filter(|price| price.is_finite() && *price >= 0.0)
                    .map(Some)
                    .ok_or_else(|| format!("model_info.{key} must be a non-negative number")),
            }
        };
        let [input, output, cache_read, cache_creation] = PRICE_KEYS;
        Ok(Self {
            input: price(input)?,
            output: price(output)?,
            cache_read: price(cache_read)?,
            cache_creation: price(cache_creation)?,
            // Informative elsewhere (LiteLLM lists it): one that is not a whole number is
            // no bound, not an error.
            max_output_tokens: info
                .get("max_output_tokens")
                .and_then(serde_json::Value::as_u64),
        })
    }

    /// `model_info` with the prices `params` (an entry's `litellm_params`) names set in
    /// it: where both name a price, `litellm_params`' is the one, as LiteLLM's cost
    /// calculation takes a deployment's own `litellm_params` pricing before its model
    /// information. What `/model/info` shows and what [`Self::from_model_info`] reads.
    /// A price that is not a finite, non-negative number is an error naming its key.
    pub fn merged_model_info(
        params: &serde_json::Map<String, serde_json::Value>,
        model_info: Option<serde_json::Value>,
    ) -> Result<Option<serde_json::Value>, String> {
        let mut merged = model_info;
        for key in PRICE_KEYS {
            let Some(value) = params.get(key).filter(|value| !value.is_null()) else {
                continue;
            };
            if !value
                .as_f64()
                .is_some_and(|price| price.is_finite() && price >= 0.0)
            {
                return Err(format!(
                    "litellm_params.{key} must be a non-negative number"
                ));
            }
            let info = merged.get_or_insert_with(|| serde_json::json!({}));
            if let Some(object) = info.as_object_mut() {
                object.insert(key.to_owned(), value.clone());
            }
        }
        Ok(merged)
    }

    /// Whether the entry has a price at all: a call of an entry without one costs
    /// nothing (and its spend log entry says none).
    pub fn any(&self) -> bool {
        self.input.is_some() || self.output.is_some()
    }

    /// What `usage` costs. OpenAI's prompt tokens include the cached ones (priced at the
    /// cache read price, else the input price); Anthropic's cache reads and writes come
    /// beside its input tokens.
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        if !self.any() {
            return None;
        }
        let tokens = |count: Option<u64>| count.unwrap_or(0) as f64;
        let input = self.input.unwrap_or(0.0);
        let cached = usage
            .prompt_tokens_details
            .and_then(|details| details.cached_tokens)
            .unwrap_or(0)
            .min(usage.prompt_tokens.unwrap_or(0));
        let fresh_prompt = usage.prompt_tokens.unwrap_or(0) - cached;
        let cache_read = self.cache_read.unwrap_or(input);
        Some(
            fresh_prompt as f64 * input
                + cached as f64 * cache_read
                + tokens(usage.cache_read_input_tokens) * cache_read
                + tokens(usage.cache_creation_input_tokens) * self.cache_creation.unwrap_or(input)
                + tokens(usage.completion_tokens) * self.output.unwrap_or(0.0),
        )
    }
}

/// A budget's reset period in milliseconds, from LiteLLM's forms: `30s`, `30m`, `30h`,
/// `30d`, `2w`, `1mo` (30 days).
pub fn parse_duration_ms(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (count, unit) = text.split_at(split);
    let unit_ms: i64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        "mo" => 30 * 86_400_000,
        _ => {
            return Err(format!(
                "{text:?} is not a duration: a whole number and s, m, h, d, w or mo (\"30d\")"
            ));
        }
    };
    count
        .parse::<i64>()
        .ok()
        .filter(|count| *count > 0)
        .and_then(|count| count.checked_mul(unit_ms))
        .filter(|ms| *ms <= 100 * 365 * 86_400_000)
        .ok_or_else(|| format!("{text:?} is not a positive duration of at most a century"))
}

/// The budget window `now_ms` falls in, for windows of `duration_ms` from `start_ms`; 0
/// for a budget that never resets. Also when the window ends.
pub fn window(start_ms: i64, duration_ms: Option<i64>, now_ms: i64) -> (u64, Option<i64>) {
    match duration_ms {
        Some(duration) if duration > 0 => {
            let index = (now_ms - start_ms).max(0) / duration;
            (index as u64, Some(start_ms + (index + 1) * duration))
        }
        _ => (0, None),
    }
}

/// The budget window of `period` at `now_ms`, and when it ends (see [`window`]).
pub fn period_window(period: &BudgetPeriod, now_ms: i64) -> (u64, Option<i64>) {
    let duration = period
        .budget_duration
        .as_deref()
        .and_then(|duration| parse_duration_ms(duration).ok());
    window(period.budget_start_ms, duration, now_ms)
}

/// The budget window of `key` at `now_ms`, and when it ends (see [`window`]).
pub fn key_window(key: &StoredKey, now_ms: i64) -> (u64, Option<i64>) {
    period_window(&key.period, now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::TokenDetails;

    #[test]
    fn prices_come_from_litellm_keys_and_refuse_what_is_not_a_price() {
        let info =
            serde_json::json!({"input_cost_per_token": 0.001, "output_cost_per_token": 0.002});
        let prices = Prices::from_model_info(Some(&info)).unwrap_or_default();
        assert_eq!(prices.input, Some(0.001));
        assert!(
            Prices::from_model_info(Some(&serde_json::json!({"input_cost_per_token": -1})))
                .is_err()
        );
        assert!(
            Prices::from_model_info(Some(&serde_json::json!({"output_cost_per_token": "x"})))
                .is_err()
        );
        assert_eq!(Prices::from_model_info(None), Ok(Prices::default()));
    }

    #[test]
    fn litellm_params_prices_are_set_in_model_info_and_come_first() {
        let params = serde_json::json!({"model": "openai/x", "input_cost_per_token": 0.5, "cache_read_input_token_cost": 0.05, "output_cost_per_token": null});
        let params = params.as_object().cloned().unwrap_or_default();
        let info = serde_json::json!({"input_cost_per_token": 9.0, "output_cost_per_token": 2.0, "max_input_tokens": 10});
        let merged = Prices::merged_model_info(&params, Some(info)).unwrap_or_default();
        assert_eq!(
            merged,
            Some(
                serde_json::json!({"input_cost_per_token": 0.5, "output_cost_per_token": 2.0, "cache_read_input_token_cost": 0.05, "max_input_tokens": 10})
            )
        );
        let prices = Prices::from_model_info(merged.as_ref()).unwrap_or_default();
        assert_eq!(
            (prices.input, prices.output, prices.cache_read),
            (Some(0.5), Some(2.0), Some(0.05))
        );
        // Prices in litellm_params alone make a model_info of them.
        let alone = serde_json::json!({"output_cost_per_token": 1e-6});
        assert_eq!(
            Prices::merged_model_info(alone.as_object().unwrap_or(&serde_json::Map::new()), None),
            Ok(Some(serde_json::json!({"output_cost_per_token": 1e-6})))
        );
        let bad = serde_json::json!({"input_cost_per_token": "cheap"});
        assert!(
            Prices::merged_model_info(bad.as_object().unwrap_or(&serde_json::Map::new()), None)
                .is_err()
        );
    }

    #[test]
    fn cached_tokens_are_priced_as_cache_reads() {
        let prices = Prices {
            input: Some(1.0),
            output: Some(10.0),
            cache_read: Some(0.1),
            cache_creation: Some(2.0),
            max_output_tokens: None,
        };
        let openai = Usage {
            prompt_tokens: Some(100),
            completion_tokens: Some(5),
            prompt_tokens_details: Some(TokenDetails {
                cached_tokens: Some(40),
            }),
            ..Usage::default()
        };
        assert_eq!(prices.cost(&openai), Some(60.0 + 4.0 + 50.0));
        let anthropic = Usage {
            prompt_tokens: Some(10),
            completion_tokens: Some(1),
            cache_read_input_tokens: Some(100),
            cache_creation_input_tokens: Some(3),
            ..Usage::default()
        };
        assert_eq!(prices.cost(&anthropic), Some(10.0 + 10.0 + 6.0 + 10.0));
        assert_eq!(Prices::default().cost(&openai), None);
    }

    #[test]
    fn durations_read_litellm_forms_and_windows_follow_each_other() {
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("1mo"), Ok(30 * 86_400_000));
        for bad in ["", "0d", "d", "5y", "-1h", "99999999999999d"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
        assert_eq!(window(1_000, Some(100), 1_250), (2, Some(1_300)));
        assert_eq!(window(1_000, None, 9_999), (0, None));
    }
}
